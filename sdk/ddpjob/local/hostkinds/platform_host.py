"""A local host that runs a training image's own program with SageMaker's duties around it.

SageMaker's PyTorch container (`dlc_host`) and a request's own container command
(`container_host`) run the same way on a local host: SageMaker's duties before, while and
after the program (`platform_duties`), then `output/failure` is the host's FailureReason. A
subclass says which program runs, in which environment and folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ddpjob_runtime.platform import results
from ddpjob_runtime.shared import contract, failure, phases

from ddpjob.local.base import failure_cause
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.hostkinds import hostpython, platform_duties
from ddpjob.local.isolation import hostroot, sandbox
from ddpjob.local.isolation.fixed_port import FIXED_PORT, holder, port_free

log = logging.getLogger("ddpjob.local.hostkinds.platform_host")

LOG_TAIL_BYTES = 256 * 1024  # where a failed program's last report is found


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class PlatformHost:
    """One local host of a job whose program is the image's own, from config files to uploads."""

    #: What the program is, in the host's failure and the error when the fixed port is taken.
    program = "the training image's program"

    def __init__(self, job_dir: Path, host: str):
        self.job = JobStore(job_dir.parent.parent).job(job_dir.name)
        self.host, self.job_dir = host, job_dir
        self.root = job_dir / "hosts" / host
        self.own_namespace = sandbox.inside(self.root)  # /opt/ml is the root (`sandbox`)
        self.status_file = hostroot.status_file(job_dir, host)
        self.sync = platform_duties.checkpoint_sync(self.job, host, self.root)
        self.tensorboard = platform_duties.tensorboard_sync(self.job, host, self.root)
        self.proc: subprocess.Popen | None = None
        self.log_start = 0  # the size of the host's log when the program started

    # --- what a subclass says ------------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The program's environment: this host's, its own Python first on PATH (`hostpython`),
        with the job root `/opt/ml` itself in the host's own namespace, else named by
        `SAGEMAKER_BASE_DIR`."""
        env = dict(os.environ)
        env.pop(contract.ENV_ROOT, None)
        if not self.own_namespace:
            env[contract.ENV_ROOT] = str(self.root)
        env["PATH"] = os.pathsep.join([str(self.bin_dir), env.get("PATH", "")])
        return env

    def workdir(self) -> Path:
        return self.root

    # --- the platform's part -------------------------------------------------------------

    @property
    def python_dir(self) -> Path:
        return hostroot.python_dir(self.job_dir, self.host)

    @property
    def bin_dir(self) -> Path:
        return self.python_dir / "bin"

    def prepare(self) -> None:
        """Everything SageMaker does before the program starts; this host's own Python
        (`hostpython`), where what the program installs goes."""
        gpu_ids = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        hostpython.create(self.python_dir, hostpython.image_python(), gpu_ids)
        phases.write_phase(self.status_file, "Downloading")
        # A platform.json left there would hand the image's program duties it does not know.
        (self.root / contract.CONFIG_DIR / contract.PLATFORM_FILE).unlink(missing_ok=True)
        hostroot.write_config(self.root, platform_duties.config_files(
            self.job, self.host, self.own_namespace))
        for folder in (contract.CODE_DIR, contract.MODEL_DIR, f"{contract.OUTPUT_DIR}/data"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        platform_duties.stage_channels(self.job, self.root)
        self.sync.download()
        hosts = self.job.hosts
        if hosts[0] == self.host and len(hosts) > 1 and not port_free(FIXED_PORT):
            raise RuntimeError(
                f"port {FIXED_PORT}, where {self.program} starts its torchrun rendezvous, is "
                f"held by {holder(FIXED_PORT)}, not by a ddpjob job: free it to run this job")

    def _run_program(self) -> int:
        phases.write_phase(self.status_file, "Training")
        command = self.command()
        log.info("host %s%s: %s", self.host, "" if self.own_namespace else
                 f" ({hostroot.loopback_addresses(self.job.hosts)[self.host]})", " ".join(command))
        with contextlib.suppress(OSError):
            self.log_start = hostroot.log_file(self.job_dir, self.host).stat().st_size
        self.proc = subprocess.Popen(command, cwd=self.workdir(), env=self.environment(),
                                     start_new_session=True)
        with self.sync.running(), self.tensorboard.running():
            code = self.proc.wait()
        if code != 0:
            self._name_host_in_failure(code)
        return code

    def _name_host_in_failure(self, code: int) -> None:
        """Head the failure the program wrote (or not) as ddpjob's runtime heads its own: host,
        rank, exit code and the user's exception, from the host's log (torchrun's report, else
        the last Python traceback; `failure_cause.program_cause`), else the text's last line;
        the program's text follows, else the traceback."""
        path = self.root / "output" / failure.FAILURE_FILE
        text = path.read_text(errors="replace") if path.exists() else ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        how = (f"was stopped by {_signal_name(-code)}" if code < 0 else "failed") + (
            f": {lines[-1]}" if lines else "")
        rank, exception, details = failure_cause.program_cause(
            self._log_tail(), text, f"{self.program} {how}", signalled=code < 0)
        failure.write_failure(self.root / "output",
                              failure.reason(self.host, rank, code, exception, details))

    def _log_tail(self) -> str:
        """The end of what the program printed (the host's log, written by the supervisor;
        nothing of an earlier attempt of the job)."""
        try:
            with open(hostroot.log_file(self.job_dir, self.host), "rb") as log:
                log.seek(max(self.log_start, log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, signum: int, _frame: object) -> None:
        """SIGTERM from the supervisor: pass it to the program's whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)
        else:
            raise SystemExit(128 + signum)

    def run(self) -> int:
        """This host's part of the job; the exit code (the program's, else 1). What the
        program installed is gone afterwards, as with the container."""
        code = 1
        try:
            self.prepare()
            code = self._run_program()
        except Exception as exc:  # noqa: BLE001 - the host fails with a reason, like SageMaker
            log.exception("host %s failed before training", self.host)
            failure.write_failure(self.root / "output",
                                  f"{self.host}: {type(exc).__name__}: {exc}")
        finally:
            phases.write_phase(self.status_file, "Uploading")
            code = self._finish(code)
            shutil.rmtree(self.python_dir, ignore_errors=True)
        log.info("host %s finished with exit code %d", self.host, code)
        return code

    def _finish(self, code: int) -> int:
        failed = results.each_tried((  # each tried whatever failed before it
            self.sync.finish, self.tensorboard.finish,
            lambda: platform_duties.upload_results(self.job, self.host, self.root)))
        if failed is not None and code == 0:
            failure.write_failure(self.root / "output", f"{self.host}: upload: {failed}")
            return 1
        return code


def main(kind: type[PlatformHost], module: str, argv: list[str] | None = None) -> None:
    """`python -m <module> JOB_DIR HOST`: run one host of `kind` and exit with its code."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.exit(f"usage: python -m {module} JOB_DIR HOST")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s platform %(message)s")
    host = kind(Path(argv[0]).absolute(), argv[1])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, host.stop)
    sys.exit(host.run())
