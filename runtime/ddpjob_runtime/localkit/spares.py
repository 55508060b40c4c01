"""Spare worker interpreters of a warm pool's template (`ddpjob_runtime.localkit.zygote ...
--spare`).

A worker runs user code, so it is no fork of the template (`zygote.OWN_INTERPRETER`): on
SageMaker each rank is an interpreter of its own, with its own str hash seed and object
addresses. A cold job starts each worker as an interpreter (about 2 s of torch import). A warm
pool's template (`--spares`) keeps spares instead: fresh interpreters it started, torch and the
runtime imported, each with its own seed, each waiting to become one worker. The template hands
a worker's request to a ready spare (the client's connection, its stdio, the request); the
spare forks the worker and answers the client as the template would (`R`, `X`), then exits.
Each request for a worker starts a spare (a replacement for the one it took, or for the next
job when none was ready), so the next job on the pool finds as many as this one asked for;
at most `MOST_WAITING` wait. A spare dies with its template, and its worker with it. A request
whose environment fixes `PYTHONHASHSEED` or sets other `PYTHON*` start-up variables than the
spares were started with gets none (each drew its own seed): its worker starts on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping

from ddpjob_runtime.shared import contract, processes

log = logging.getLogger("ddpjob_runtime.localkit.spares")

MOST_WAITING = 16  # spares started or ready, not yet handed a worker
READY = b"ready"
_MAX_MESSAGE = 1 << 20


def startup_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What of `env` an interpreter reads as it starts (`PYTHON*`: hash seed, warnings, dev
    mode, ...), so a process forked from one started otherwise would not honour it; not
    PYTHONPATH, which a forked process takes from its request."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


class Spares:
    """The spares of one template: started (`start`), ready (their `READY`), handed a worker
    (`hand_over`), reaped when they exit; their sockets are in the template's `selector` with
    the data `("spare", socket)` (`heard` handles what they say)."""

    def __init__(self, folder: str, env: dict[str, str], selector: selectors.BaseSelector):
        # Each spare draws its own seed: the template's environment without PYTHONHASHSEED.
        self.folder, self.selector = folder, selector
        self.env = {k: v for k, v in env.items() if k != "PYTHONHASHSEED"}
        self.procs: dict[socket.socket, subprocess.Popen] = {}
        self.waiting: list[socket.socket] = []  # started, not handed a worker yet
        self.ready: list[socket.socket] = []

    def start(self) -> None:
        """Start one more spare, unless `MOST_WAITING` wait already."""
        if len(self.waiting) >= MOST_WAITING:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ddpjob_runtime.localkit.zygote", str(theirs.fileno()),
                 self.folder, contract.ZYGOTE_SPARE_FLAG],
                pass_fds=[theirs.fileno()], env=self.env, stdin=subprocess.DEVNULL,
                preexec_fn=processes.ends_with_this_process(signal.SIGKILL),
            )  # fmt: skip
        self.procs[ours] = proc
        self.waiting.append(ours)
        self.selector.register(ours, selectors.EVENT_READ, ("spare", ours))

    def hand_over(self, message: bytes, env: Mapping[str, str], conn: socket.socket,
                  fds: list[int]) -> bool:
        """Give a ready spare the client's request (`message`, with the environment `env`),
        connection and stdio `fds` (the caller closes its copies); False when none is ready
        (a spare then starts for the next request) or `env` asks for an interpreter started
        otherwise (a fixed hash seed, other `PYTHON*` settings: none starts)."""
        if startup_environment(env) != startup_environment(self.env):
            return False
        handed = False
        while self.ready and not handed:
            spare = self.ready.pop(0)
            self.waiting.remove(spare)
            try:
                socket.send_fds(spare, [message], [conn.fileno(), *fds])
                handed = True
            except OSError as exc:  # it died since it said it was ready: reaped on its EOF
                log.warning("a spare interpreter is gone: %s", exc)
        self.start()
        return handed

    def heard(self, spare: socket.socket) -> None:
        """A spare said it is ready, or exited (its socket's end: reap it)."""
        with contextlib.suppress(OSError):
            if spare.recv(len(READY)) == READY:
                self.ready.append(spare)
                log.info("spare worker interpreter %d is ready", self.procs[spare].pid)
                return
        self.selector.unregister(spare)
        for listed in (self.waiting, self.ready):
            if spare in listed:
                listed.remove(spare)
        self.procs.pop(spare).wait()
        spare.close()

    def pids(self) -> set[int]:
        """The pids of the spares not reaped yet."""
        return {proc.pid for proc in self.procs.values()}

    def stop(self) -> None:
        """Kill every spare (their workers die with them)."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


def take_one(channel: socket.socket) -> tuple[socket.socket, bytes, list[int]] | None:
    """In a spare (its torch imported): say it is ready, then wait for one worker's request;
    the client's connection, the request and its stdio fds (None: the template is gone)."""
    channel.send(READY)
    try:
        message, fds, _, _ = socket.recv_fds(channel, _MAX_MESSAGE, 4)
    except OSError:
        return None
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return None
    return socket.socket(fileno=fds[0]), message, fds[1:]
