"""What makes a process one of the local backend's detached ones (a job's supervisor, a tuning
job's controller): `python -m <module> FOLDER`, private files, logs, a title, stopped by a
signal, not by the terminal that started its client."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Protocol

from ddpjob_runtime.shared import proctitle


class Stoppable(Protocol):
    signalled: bool


def folder_argument(module: str, role: str, argv: list[str] | None) -> Path:
    """The FOLDER of `python -m <module> FOLDER`, once this process writes private files
    (umask 077), logs as `role` and is titled `ddpjob-<role> FOLDER`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit(f"usage: python -m {module} FOLDER")
    os.umask(0o077)  # what the job writes (roots, logs, checkpoints, outputs) is the user's only
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {role} %(message)s")
    folder = Path(argv[0]).absolute()
    proctitle.set_title(role, folder)
    return folder


def stop_on_signals(target: Stoppable, log: logging.Logger) -> None:
    """SIGTERM and SIGINT ask `target` to stop (it polls `signalled`); SIGHUP is ignored (the
    terminal that started the client may close)."""
    def on_signal(signum: int, _frame: object) -> None:
        log.info("received signal %d: stopping", signum)
        target.signalled = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
