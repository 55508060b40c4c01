"""One job at a time on this machine's fixed rendezvous port, the others waiting their turn.

SageMaker's PyTorch toolkit and ModelTrainer's drivers start torchrun's rendezvous on port 7777
of the first host (`FIXED_PORT`). On SageMaker every job has hosts of its own; here
every local host shares this machine's loopback, so two such multi-host jobs cannot run at once.
The supervisor of such a job holds this user's lock of the port (an `flock`, which ends with its
holder, however it ends) while its hosts run; a job that finds the lock held stays `Starting`,
its status naming the job ahead of it, until the lock is free, it is stopped, or
`StoppingCondition.MaxPendingTimeInSeconds` passed (then it is stopped, as SageMaker stops a job
pending that long). A port held by anything else than such a job fails the first host at once,
naming the process (`holder`). The lock's folder under `$HOME/.cache` gets the home's checks
(`lock_dir`), and what its file says is shown only when it is a job's name.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ddpjob_runtime.shared import contract

from ddpjob.local.base.jobstore import check_dir, checked_private_dir

# The rendezvous port of SageMaker's PyTorch toolkit (sagemaker_training.torch_distributed) and
# of ModelTrainer's drivers (SM_MASTER_PORT).
FIXED_PORT = 7777
POLL_S = 0.5
LOCK_DIR_WHAT = "the fixed port's lock folder"


def lock_dir() -> Path:
    """`$HOME/.cache/ddpjob`, the user's own (jobs of every ddpjob home share it), checked as
    the home is: where HOME is a shared folder (HOME=/tmp) another user must not own it, nor
    a folder or link on its way (`jobstore.checked_private_dir`)."""
    return checked_private_dir(_lock_path(), LOCK_DIR_WHAT)


def check_lock_dir() -> None:
    """UserInputError when `lock_dir` would refuse the folder; nothing is written (a job on the
    port is refused when it is created, not failed later by its supervisor)."""
    check_dir(_lock_path(), LOCK_DIR_WHAT)


def _lock_path() -> Path:
    return Path.home() / ".cache" / "ddpjob"


class PortLock:
    """This user's lock of `port`: `try_take` it for `job`, `release` it."""

    def __init__(self, job: str, port: int = FIXED_PORT, folder: Path | None = None) -> None:
        self.port, self.job = port, job
        self.path = (folder or lock_dir()) / f"port-{port}.lock"
        self._fd: int | None = None

    def try_take(self) -> str | None:
        """None once this job holds the lock, else the name of the job that holds it (or
        "another job": the file is the user's, but any of its processes may write it)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, contract.MAX_JOB_NAME + 1, 0).decode(errors="replace").strip()
            os.close(fd)
            return holder if contract.JOB_NAME_PATTERN.fullmatch(holder) else "another job"
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.job.encode(), 0)
        self._fd = fd
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the flock goes with the last descriptor
            self._fd = None


@dataclass(frozen=True)
class Waited:
    """How the wait for the port ended: `taken`, else `stopped` (asked to) or `pending_s`
    passed MaxPendingTimeInSeconds."""

    taken: bool
    stopped: bool = False
    pending_s: float = 0.0


def wait_for(lock: PortLock, limit_s: float | None, stop_requested: Callable[[], bool],
             say: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> Waited:
    """Take `lock`, waiting while another job holds it: `say` names each new holder, a stop
    request or `limit_s` (MaxPendingTimeInSeconds) ends the wait."""
    start, told = clock(), None
    while (holder := lock.try_take()) is not None:
        if holder != told:
            told = holder
            say(f"waiting for port {lock.port}, held by job {holder}")
        if stop_requested():
            return Waited(taken=False, stopped=True)
        if limit_s is not None and clock() - start >= limit_s:
            return Waited(taken=False, pending_s=clock() - start)
        sleep(POLL_S)
    return Waited(taken=True)


def port_free(port: int) -> bool:
    """Whether nothing listens on `port` of this machine (bound as torch's store binds it)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def holder(port: int) -> str:
    """Who listens on TCP `port` of this machine: `pid N (command line)` where this user may
    see it, else that it is a process of another user."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes
                   for fd in os.listdir(f"/proc/{pid}/fd")):
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                return f"pid {pid} ({command.decode(errors='replace').strip()[:120]})"
    return "a process this user cannot see (another user's?)"
