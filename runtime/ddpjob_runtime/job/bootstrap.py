"""`ddpjob-train`: what every host of a job runs (the container's `train`).

Reads the job root, fetches the code, stages inputs and the latest checkpoint, launches the
workers (torchrun, mpirun or one process), then uploads the results from the first host.
Exit code: 0, else the first failing rank's own code, 1 for a runtime error; every failure
also writes `output/failure`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
from pathlib import Path

from ddpjob_runtime.job import launcher
from ddpjob_runtime.job.entrypoint import check_entry_point
from ddpjob_runtime.platform import (
    channels,
    checkpoint_restore,
    hosts,
    results,
    sm_variables,
    sourcedir,
    stand_ins,
)
from ddpjob_runtime.platform.environment import (
    TrainingEnvironment,
    job_root,
    read_config,
    read_environment,
)
from ddpjob_runtime.platform.mirrors import JobMirrors
from ddpjob_runtime.shared import checkpoint_layout, contract, failure, phases, proctitle, storage
from ddpjob_runtime.shared.errors import JobStopped, RuntimeContractError, StorageError

log = logging.getLogger("ddpjob_runtime")

# The host's TMPDIR (torchrun's and the workers'), inside its root so that even a killed host
# leaves nothing in /tmp; removed at the end (by the platform if the host was killed).
TMP_DIR = "tmp"
RECORDS = "ranks"  # below TMP_DIR: each failed rank's record (`failure.record`)


def _setup_logging(level: object = logging.INFO) -> None:
    if isinstance(level, str) and not level.isdigit():
        level = logging.getLevelName(level.upper())
    try:
        level = int(level)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        level = logging.INFO
    logging.basicConfig(
        level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True
    )


def _host_of(root: Path) -> str:
    """Best effort, for reporting a failure to read the config itself."""
    try:
        return str(read_config(root, contract.RESOURCE_CONFIG_FILE)["current_host"])
    except (RuntimeContractError, KeyError):
        return socket.gethostname()


def _prepare_folders(env: TrainingEnvironment) -> None:
    for folder in (env.code_dir, env.model_dir, env.output_data_dir, env.checkpoint_dir):
        folder.mkdir(parents=True, exist_ok=True)
    for channel in env.input_data_config:
        env.channel_dir(channel).mkdir(parents=True, exist_ok=True)


def _stage_inputs(env: TrainingEnvironment) -> None:
    """Channels and the latest checkpoint, when platform.json asks the runtime to bring them."""
    checkpoint_uri = env.platform.checkpoint_s3_uri
    if env.platform.channels:
        channels.stage(env.platform.channels, env.channel_dir)
    if checkpoint_uri and env.platform.staged_checkpoint:
        staged = Path(env.platform.staged_checkpoint)
        channels.link_tree(staged, env.checkpoint_dir)
        found = checkpoint_layout.steps(path.name for path in staged.iterdir())
        log.info("checkpoint restored: %s", f"step {found[-1]} (linked from the job's staged "
                 f"copy)" if found else "none yet")
    elif checkpoint_uri:

        step = checkpoint_restore.restore_latest(checkpoint_uri, env.checkpoint_dir)
        log.info("checkpoint restored: %s", f"step {step}" if step is not None else "none yet")


def _worker_env(env: TrainingEnvironment, gpus: int, tmp_dir: Path,
                mirrors: JobMirrors) -> dict[str, str]:
    if env.job_name:
        os.environ.setdefault(contract.ENV_TRAINING_JOB_NAME, env.job_name)  # SageMaker sets it too
    variables = dict(os.environ)
    variables.update(sm_variables.render(env, gpus))
    variables.update(
        {
            contract.ENV_CHECKPOINT_DIR: str(env.checkpoint_dir),
            failure.RECORD_DIR_ENV: str(tmp_dir / RECORDS),
            contract.ENV_STACKS_DIR: str(env.root / contract.STACKS_DIR),
            "TMPDIR": str(tmp_dir),  # torchrun's and the workers' temporary files
            "PYTHONUNBUFFERED": "1",
        }
    )
    # SageMaker's PyTorch container sets these two for every job, whatever the distribution
    # (`sagemaker_pytorch_container.training._set_distributed_environment`), and no RANK or
    # WORLD_SIZE: a script started once per host passes its own to init_process_group.
    # torchrun and mpirun give their workers the first host's address and the same port.
    addr, port = hosts.master_name(env)
    variables.update({contract.ENV_MASTER_ADDR: addr, contract.ENV_MASTER_PORT: str(port)})
    hps = env.hyperparameters
    if launcher.choose_strategy(hps) is launcher.Strategy.TORCHRUN:
        variables.update(launcher.torchrun_environment())
        # torchrun sets 1 for several workers per host unless the user set it, and says so in
        # a 4-line banner on every host of every job: set it as torchrun would, without it.
        if launcher.processes_per_host(hps, gpus) > 1:
            variables.setdefault("OMP_NUM_THREADS", "1")
    if env.platform.status_file:
        variables[phases.STATUS_FILE_ENV] = env.platform.status_file
    if env.platform.checkpoint_s3_uri:
        variables[contract.ENV_CHECKPOINT_URI] = env.platform.checkpoint_s3_uri
    if mirrors.tensorboard_dir is not None:
        variables[contract.ENV_TENSORBOARD_DIR] = str(mirrors.tensorboard_dir)
    path = stand_ins.worker_path(env.platform.stand_ins, variables.get("PYTHONPATH"))
    if path:
        variables["PYTHONPATH"] = path
    return variables


def _command(env: TrainingEnvironment, gpus: int, entry: str) -> list[str]:
    hps = env.hyperparameters
    strategy = launcher.choose_strategy(hps)
    args = sm_variables.user_args(env.user_hyperparameters)
    nproc = launcher.processes_per_host(hps, gpus)
    if strategy is launcher.Strategy.SINGLE:
        return launcher.single_command(entry, args)
    addr, port = hosts.master_address(env)
    if strategy is launcher.Strategy.MPI:
        command = launcher.mpirun_command(
            host_addresses=[hosts.host_address(env, h) for h in env.hosts],
            nproc=nproc,
            master_addr=addr,
            master_port=port,
            entry=entry,
            args=args,
        )
        if not env.is_master:
            raise RuntimeContractError(
                "distribution 'mpi': only the first host starts mpirun; hosts other than "
                f"{env.hosts[0]} need an MPI daemon (orted), which this runtime does not start"
            )
        return command
    return launcher.torchrun_command(
        nnodes=len(env.hosts),
        node_rank=env.host_index,
        nproc=nproc,
        master_addr=addr,
        master_port=port,
        entry=entry,
        args=args,
        max_restarts=launcher.max_restarts(hps),
    )


def _outcome(env: TrainingEnvironment, result: launcher.LaunchResult, tmp_dir: Path) -> int:
    """The host's exit code; writes `output/failure` when it is not 0."""
    if result.exit_code == 0:
        return 0
    when, rank, details = None, None, ""
    first = failure.first_failure(tmp_dir / RECORDS)
    if first is not None:
        when, rank, code, why = first.time, first.rank, first.exit_code, first.exception
        restarted = failure.restarts(tmp_dir / RECORDS)  # before the traceback: it is cut
        details = "\n".join(f"- {line}" for line in restarted) + ("\n\n" if restarted else "")
        details += "\n".join(first.traceback.strip().splitlines()[-failure.TRACEBACK_LINES:])
    elif result.stopped_by is not None:
        code = 128 + result.stopped_by
        why = f"stopped by {signal.Signals(result.stopped_by).name}"
    elif result.exit_code < 0:
        code = 128 - result.exit_code
        why = f"the launcher was killed by {signal.Signals(-result.exit_code).name}"
    else:
        code = result.exit_code
        why = f"the launcher exited with code {code} (a worker could not start; see the host's log)"
    text = failure.reason(env.current_host, rank, code, why, details)
    failure.write_failure(env.output_dir, text, when)
    return code


def _upload_results(env: TrainingEnvironment) -> None:
    """model/ and output/data/ as tar.gz under `<output_path>/<job_name>/output/`."""
    output_path = env.platform.output_path
    if not output_path or not env.is_master:
        return
    phases.write_phase(env.platform.status_file, "Uploading")
    results.upload_results(env.model_dir, env.output_data_dir,
                   storage.join(output_path, env.job_name, "output"))


def _train(env: TrainingEnvironment, tmp_dir: Path, mirrors: JobMirrors) -> int:
    status_file = env.platform.status_file
    phases.write_phase(status_file, "Downloading")
    _prepare_folders(env)
    entry = env.entry_point
    if env.submit_directory:
        sourcedir.fetch_source(env.platform.submit_directory or env.submit_directory,
                               env.code_dir)
    site = sourcedir.install_requirements(env.code_dir, _python_dir(env))
    check_entry_point(env.code_dir, entry)
    gpus = sm_variables.num_gpus()
    command = _command(env, gpus, entry)
    _stage_inputs(env)
    mirrors.download()
    variables = _worker_env(env, gpus, tmp_dir, mirrors)
    if site is not None:  # what requirements.txt installed, before this Python's own packages
        variables["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(site), variables.get("PYTHONPATH")) if p)
    phases.write_phase(status_file, "Training")
    log.info("%s", launcher.summary(env.hyperparameters, gpus, len(env.hosts), env.current_host))
    with mirrors.running():
        result = launcher.run(command, variables, cwd=str(env.code_dir))
    return _outcome(env, result, tmp_dir)


def _python_dir(env: TrainingEnvironment) -> Path | None:
    """A local host's own Python environment (platform.json), None in SageMaker's container."""
    return Path(env.platform.python_dir) if env.platform.python_dir else None


def _stop(signum: int, _frame: object) -> None:
    raise JobStopped(signum)  # before the launch: unwind, report, upload (the launcher forwards)


def train(root: Path | None = None) -> int:
    """Run this host's part of the job under `root` (default: the job root); the exit code."""
    root = root or job_root()
    try:
        env = read_environment(root)
    except RuntimeContractError as exc:
        log.error("%s", exc)
        failure.write_failure(root / "output", failure.reason(_host_of(root), None, 1, str(exc)))
        return 1
    _setup_logging(env.hyperparameters.get(contract.CONTAINER_LOG_LEVEL, logging.INFO))
    tmp_dir = env.root / TMP_DIR
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir(mode=0o700)
    code = 1
    mirrors = JobMirrors(env)
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = _train(env, tmp_dir, mirrors)
    except (RuntimeContractError, StorageError, JobStopped) as exc:
        log.error("%s", exc)
        code = exc.exit_code
        text = failure.reason(env.current_host, None, code, str(exc))
        failure.write_failure(env.output_dir, text)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if (python_dir := _python_dir(env)) is not None:  # what the job installed ends with it
            shutil.rmtree(python_dir, ignore_errors=True)
        # The checkpoint folder's other files and TensorBoard's, then model/ and output/data/:
        # each is tried whatever failed before it.
        failed = results.each_tried([*mirrors.finishes, lambda: _upload_results(env)])
        if failed is not None and code == 0:
            code = 1
            failure.write_failure(env.output_dir, failure.reason(
                env.current_host, None, 1, f"upload: {failed}"))
    log.info("host %s finished with exit code %d", env.current_host, code)
    return code


def main() -> None:
    """Console entry point `ddpjob-train`."""
    _setup_logging()
    proctitle.set_title("train", _host_of(job_root()))
    sys.exit(train())


if __name__ == "__main__":  # as a host forked from the job's template (`forkrun`)
    main()
