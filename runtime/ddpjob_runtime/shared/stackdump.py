"""Every worker's Python stacks on demand: where a hung rank is (`ddpjob stacks`).

Each worker registers Python's own `faulthandler` on `STACK_SIGNAL` (every thread, chained to
a handler registered before, if any), writing into `rank-<N>.stacks` in `DDPJOB_STACKS_DIR` (the
host's `tmp/stacks`). faulthandler writes from its C signal handler, so a rank blocked inside a
collective (in C++, holding the GIL or not) still answers. Beside it, `rank-<N>.json` says which
process to signal: its pid, its start time (a reused pid is never signalled: the signal's
default action ends a process) and its main thread (the thread that says where the rank is).
The reader (`ddpjob.local.watch.stacks`) trusts none of it: a rank's code can rewrite both files.
A real-time signal, not SIGUSR1/2, which training code and its launchers use for themselves.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from pathlib import Path
from typing import IO

from ddpjob_runtime.shared import contract, fsutil

STACK_SIGNAL = signal.SIGRTMIN + 4
_registered: list[IO[str]] = []  # the open dump file: faulthandler writes to its descriptor


def stacks_file(folder: Path, rank: int) -> Path:
    """Where rank `rank`'s stacks are written when it gets `STACK_SIGNAL`."""
    return folder / f"rank-{rank}.stacks"


def info_file(folder: Path, rank: int) -> Path:
    """Rank `rank`'s registration: `{"pid", "start_time", "main_thread", "code_dir"}`."""
    return folder / f"rank-{rank}.json"


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            stat = file.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def register(rank: int, folder: str | Path | None = None) -> Path | None:
    """Dump this process's stacks into the rank's file on `STACK_SIGNAL` (the folder: default
    `$DDPJOB_STACKS_DIR`; nothing when neither is set); returns the registration file."""
    folder = folder or os.environ.get(contract.ENV_STACKS_DIR)
    if not folder:
        return None
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Append mode: the reader empties the file before each request, and the writes go on at its
    # new end (not at the old offset, which would leave a hole).
    dump = open(stacks_file(folder, rank), "a")  # noqa: SIM115 - open as long as the process
    # Chained to a handler that was there before, never to the default action: that would end
    # the process right after its dump.
    before = signal.getsignal(STACK_SIGNAL)
    faulthandler.register(STACK_SIGNAL, file=dump, all_threads=True,
                          chain=before not in (signal.SIG_DFL, signal.SIG_IGN))
    _registered[:] = [dump]
    info = {"pid": os.getpid(), "start_time": start_time(os.getpid()),
            "main_thread": threading.main_thread().ident, "code_dir": os.getcwd()}
    fsutil.write_json(info_file(folder, rank), info, mode=0o600)
    return info_file(folder, rank)
