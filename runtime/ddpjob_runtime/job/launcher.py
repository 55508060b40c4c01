"""Build the launch command (torchrun, mpirun or a single process) and run it as one group.

The launched tree lives in its own process group; it dies with the bootstrap (PDEATHSIG, or
killed by the job's template where the template forked it), receives the bootstrap's
SIGTERM/SIGINT, and is killed whole when the launch ends, or `KILL_GRACE_S` after a stop that
came from the bootstrap's parent dying.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpjob_runtime.shared import contract, forkrun, processes
from ddpjob_runtime.shared.errors import RuntimeContractError

log = logging.getLogger(__name__)

Launched = subprocess.Popen | forkrun.Forked  # what `run` starts
WORKER_MODULE = "ddpjob_runtime.job.worker"
AGENT_MODULE = "ddpjob_runtime.job.agent"  # torchrun, bound to the rendezvous address
KILL_GRACE_S = 5.0
_POLL_S = 0.2
_TORCHRUN_FLAGS = (contract.TORCH_DISTRIBUTED, contract.PYTORCH_DDP, contract.SMDDP)


class Strategy(enum.Enum):
    TORCHRUN = "torch_distributed"
    MPI = "mpi"
    SINGLE = "single process per host"


def _enabled(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def choose_strategy(hyperparameters: Mapping[str, Any]) -> Strategy:
    """The distribution the official SDK asked for through its `sagemaker_*_enabled` flags."""
    if any(_enabled(hyperparameters.get(flag)) for flag in _TORCHRUN_FLAGS):
        return Strategy.TORCHRUN
    if _enabled(hyperparameters.get(contract.MPI)):
        return Strategy.MPI
    return Strategy.SINGLE


def processes_per_host(hyperparameters: Mapping[str, Any], gpus: int) -> int:
    """Workers on this host: `ddpjob_processes_per_host`, else MPI's setting, else GPUs, else 1."""
    for name in (contract.PROCESSES_PER_HOST, contract.MPI_PROCESSES):
        value = hyperparameters.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RuntimeContractError(
                f"hyperparameter {name!r} must be a positive integer, got {value!r}"
            )
        return value
    return gpus or 1


def max_restarts(hyperparameters: Mapping[str, Any]) -> int:
    """Worker restarts allowed (`ddpjob_max_restarts`, torchrun's `--max_restarts`), default 0."""
    value = hyperparameters.get(contract.MAX_RESTARTS, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not (
        0 <= value <= contract.MAX_RESTARTS_LIMIT
    ):
        raise RuntimeContractError(
            f"hyperparameter {contract.MAX_RESTARTS!r} must be an integer from 0 to "
            f"{contract.MAX_RESTARTS_LIMIT}, got {value!r}"
        )
    return value


def _python_module(name: str) -> list[str]:
    """`python -m name`, or a `forkrun` client of it where the job has a template process to
    fork it from."""
    if os.environ.get(contract.ENV_ZYGOTE):
        return forkrun.command(name)
    return [sys.executable, "-m", name]


def worker_command(entry: str, args: Sequence[str]) -> list[str]:
    """The wrapper each worker runs (module form so that launchers pass it through)."""
    return [*_python_module(WORKER_MODULE), entry, *args]


def _torchrun_workers(entry: str, args: Sequence[str]) -> list[str]:
    """The workers' command as torchrun's last arguments: `-m module ...` (torchrun adds
    `python -u`), or a forkrun client's whole command line (`--no-python`)."""
    if os.environ.get(contract.ENV_ZYGOTE):
        return ["--no-python", *worker_command(entry, args)]
    return ["-m", WORKER_MODULE, entry, *args]


def torchrun_environment() -> dict[str, str]:
    """What `torchrun_command` needs in its environment: torchrun's prefix of each worker's
    lines, `[rank 3] ` (its global rank)."""
    return {contract.ENV_LOG_LINE_PREFIX: contract.RANK_LINE_PREFIX}


def torchrun_command(
    *,
    nnodes: int,
    node_rank: int,
    nproc: int,
    master_addr: str,
    master_port: int,
    entry: str,
    args: Sequence[str],
    max_restarts: int = 0,
) -> list[str]:
    """torchrun (through `ddpjob_runtime.job.agent`) with a static rendezvous on the first host."""
    return [
        *_python_module(AGENT_MODULE),
        f"--nnodes={nnodes}",
        f"--node_rank={node_rank}",
        f"--nproc_per_node={nproc}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
        f"--max_restarts={max_restarts}",
        "--tee=3",  # each worker's stdout and stderr, line by line with its rank (see run)
        *_torchrun_workers(entry, args),
    ]


def mpirun_command(
    *,
    host_addresses: Sequence[str],
    nproc: int,
    master_addr: str,
    master_port: int,
    entry: str,
    args: Sequence[str],
) -> list[str]:
    """`mpirun` across the hosts, `nproc` ranks each; run on the first host only."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeContractError(
            "distribution 'mpi' needs mpirun, which is not installed on this host; "
            "use distribution={'torch_distributed': {'enabled': True}} instead"
        )
    hosts = ",".join(f"{address}:{nproc}" for address in host_addresses)
    # mpirun warns about an exported name that is unset, so export only those that are set.
    exported = [arg for name in ("PATH", "PYTHONPATH") if name in os.environ
                for arg in ("-x", name)]
    return [
        mpirun,
        "--allow-run-as-root",
        "-np",
        str(nproc * len(host_addresses)),
        "--host",
        hosts,
        "-x",
        f"{contract.ENV_MASTER_ADDR}={master_addr}",
        "-x",
        f"{contract.ENV_MASTER_PORT}={master_port}",
        *exported,
        *worker_command(entry, args),
    ]


def single_command(entry: str, args: Sequence[str]) -> list[str]:
    """One process on this host, like the toolkit without a distribution."""
    return worker_command(entry, args)


def summary(hyperparameters: Mapping[str, Any], gpus: int, hosts: int, host: str) -> str:
    """What the launch on `host` starts, in one line for the job's log: `starting 2 processes
    on algo-1 (torchrun, CPU)` (the whole command is logged at debug level)."""
    strategy, nproc = choose_strategy(hyperparameters), processes_per_host(hyperparameters, gpus)
    where = "1 GPU" if gpus == 1 else f"{gpus} GPUs" if gpus else "CPU"
    if strategy is Strategy.SINGLE:
        return f"starting 1 process on {host} ({where})"
    if strategy is Strategy.MPI:
        return f"starting {nproc * hosts} processes on {hosts} hosts from {host} (mpirun, {where})"
    return f"starting {nproc} process{'es' if nproc > 1 else ''} on {host} (torchrun, {where})"


def kill_group(proc: Launched, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the launched process group, SIGKILL what is left after `grace_s`, reap the leader."""
    pgid = proc.pid
    if processes.group_alive(pgid):
        processes.signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and processes.group_alive(pgid):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
            if proc.returncode is not None and processes.group_alive(pgid):
                time.sleep(0.1)  # orphaned members are reaped by init, not by us
        processes.signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


@dataclass(frozen=True)
class LaunchResult:
    exit_code: int  # the launcher's (negative: killed by that signal)
    stopped_by: int | None  # the signal the bootstrap received and forwarded, if any


def run(cmd: Sequence[str], env: Mapping[str, str], cwd: str) -> LaunchResult:
    """Run `cmd` as its own process group; forward SIGTERM/SIGINT; leave nothing behind."""
    log.debug("launching: %s", shlex.join(cmd))
    stopped: list[int] = []
    procs: list[Launched] = []

    def forward(signum: int, _frame: object) -> None:
        stopped.append(signum)
        log.warning("received signal %d: stopping the workers", signum)
        for proc in procs:
            processes.signal_group(proc.pid, signum)

    def orphaned_stop() -> bool:  # stopped because our parent died: nobody waits for us
        return bool(stopped) and os.getppid() != parent

    parent = os.getppid()
    # Handlers first: a signal that arrives during the start must still reach the group.
    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        procs.append(_start(cmd, env, cwd))
        if stopped:
            forward(stopped[0], None)
        _wait(procs[0], give_up=orphaned_stop)
    finally:
        for proc in procs:
            kill_group(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = procs[0].returncode
    return LaunchResult(-signal.SIGKILL if code is None else code, stopped[0] if stopped else None)


def _start(cmd: Sequence[str], env: Mapping[str, str], cwd: str) -> Launched:
    """Start `cmd` in a session of its own that dies with this process: a forkrun client's
    command is asked of the template directly (no client; a child it forks is killed when
    this process dies), any other is a subprocess (SIGTERM when this process dies), as is a
    client's module that the template did not fork (it said why)."""
    module = forkrun.module_of(cmd)
    forked = forkrun.fork(module, dict(env), cwd) if module else None
    return forked or subprocess.Popen(
        forkrun.plain_command(module) if module else list(cmd),
        env=forkrun.plain_environment(dict(env)), cwd=cwd,
        start_new_session=True,
        preexec_fn=processes.ends_with_this_process(),
    )  # fmt: skip


def _wait(proc: Launched, give_up: Callable[[], bool]) -> None:
    """Wait for `proc` to exit, or until `give_up()` says to end it without waiting further.

    torchrun gives a worker that outlives its SIGTERM (a rank finishing a checkpoint upload)
    30 s, then 30 s more after SIGKILL: a host whose parent died must not wait for that.
    """
    while not give_up():
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_POLL_S)
            return
    log.warning("the host's parent is gone: ending the workers now")
