"""The template process of a local job's hosts (`ddpjob_runtime.zygote`): torch imported once.

Every host's runtime (`ddpjob-train`'s module), agent and worker is forked from it instead of
starting an interpreter and importing torch on its own: the supervisor starts each host as a
`ddpjob_runtime.forkrun` client, and the hosts' launchers run agents and workers through it
too (the template's name in `DDPJOB_ZYGOTE` turns that on). The listening
socket is made here, before any host starts, and handed to the template: a client that
connects while the template still imports torch waits in the socket's backlog.

`DDPJOB_PRELOAD=0` turns templates off (every process starts its own interpreter, as before).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path

from ddpjob_runtime import forkrun, processes

log = logging.getLogger("ddpjob.local.supervisor")

SWITCH_ENV = "DDPJOB_PRELOAD"
ZYGOTE_MODULE = "ddpjob_runtime.zygote"
STOP_GRACE_S = 5.0
_OFF = ("0", "false", "no", "off")


def enabled() -> bool:
    """Whether local jobs fork their processes from a template (`DDPJOB_PRELOAD`, default on;
    Linux only: it needs `pidfd_open` and SCM_RIGHTS)."""
    switch = os.environ.get(SWITCH_ENV, "").strip().lower()
    return switch not in _OFF and sys.platform.startswith("linux")


class Template:
    """One template process, started by `start` and ended by `stop`."""

    def __init__(self, folder: Path, log_file: Path):
        self.folder, self.log_file = folder, log_file
        self.proc: subprocess.Popen | None = None
        self.name = ""

    def start(self) -> str:
        """Start the template (its command line names `folder`, and so do those of the
        processes forked from it); returns the name its clients connect to (`DDPJOB_ZYGOTE`)."""
        self.name = f"@ddpjob-zygote-{os.getpid()}-{secrets.token_hex(8)}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            listener.bind("\0" + self.name[1:])
            listener.listen(socket.SOMAXCONN)
            with open(self.log_file, "ab") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", ZYGOTE_MODULE, str(listener.fileno()), str(self.folder)],
                    pass_fds=[listener.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    preexec_fn=processes.ends_with_this_process(),
                )  # fmt: skip
        log.info("started the job's template process (pid %d)", self.proc.pid)
        return self.name

    def command(self, module: str) -> list[str]:
        """`python -m module`, forked from this template by a `forkrun` client."""
        return forkrun.command(module)

    def stop(self) -> None:
        """End the template and every process forked from it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=STOP_GRACE_S)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc, self.name = None, ""
