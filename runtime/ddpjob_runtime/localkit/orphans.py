"""A template's adopted orphans: it is the subreaper of every process forked from it.

What a job's process leaves behind — a background child never waited for, one in a new session,
a double-forked daemon — is reparented to the nearest subreaper ancestor when its parent exits,
else to init, where nothing of the job's would find it. A template that is the subreaper keeps
them below itself, so whoever ends the job (the supervisor, a warm pool's lease) finds them
there; the template reaps them as they exit (SIGCHLD wakes its selector through `sock`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Set

from ddpjob_runtime.shared import processes


class Orphans:
    """Make this process a subreaper; `sock` becomes readable when a child exited (register
    it in the serving loop's selector, `drain` it, then `reap`)."""

    def __init__(self) -> None:
        processes.become_subreaper()
        self.sock, wakeup = socket.socketpair()
        for end in (self.sock, wakeup):
            end.setblocking(False)
        signal.set_wakeup_fd(wakeup.detach(), warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup byte is all it needs

    def drain(self) -> None:
        """Read the wakeup bytes (one per SIGCHLD)."""
        with contextlib.suppress(OSError):
            while self.sock.recv(4096):
                pass

    @staticmethod
    def reap(tracked: Set[int]) -> None:
        """Reap the exited children not in `tracked` (those the caller waits for itself); stops
        at the first tracked one, which the caller reaps next, then calls this again."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid in tracked:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)

    @staticmethod
    def forget() -> None:
        """In a forked child, before it closes the inherited fds: no SIGCHLD handler, and no
        signal written to the wakeup fd's number once another file has it."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
