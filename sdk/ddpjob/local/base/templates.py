"""The template of a local job's hosts (`ddpjob_runtime.localkit.zygote`): torch imported once.

Every host's runtime (`ddpjob-train`'s module), agent and worker is forked from it instead of
starting an interpreter and importing torch on its own: the supervisor starts each host as a
`ddpjob_runtime.shared.forkrun` client, and the hosts' launchers run agents and workers through it
too (the template's name in `DDPJOB_ZYGOTE` turns that on). The listening
socket is made here, before any host starts, and handed to the template: a client that
connects while the template still imports torch waits in the socket's backlog.

The socket is `SOCKET_NAME` in the template's folder (the job's or the warm pool's, private to
this user), not a public abstract name another user could take once the template died. The
template's process itself calls `listen` (between fork and exec), so the credentials its
clients check (SO_PEERCRED: `forkrun`) are the template's pid and this user.

Workers, which run user code, are not forked but start as interpreters of their own (each its
own str hash seed, as on SageMaker), unless the job's environment fixes `PYTHONHASHSEED`: the
template is started with the job's seed, so that its forked workers have it as every
interpreter of the job would (`ddpjob_runtime.localkit.zygote`).

`DDPJOB_PRELOAD=0` turns templates off (every process starts its own interpreter, as before).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import site
import socket
import subprocess
import sys
from pathlib import Path

from ddpjob_runtime.shared import contract, forkrun, processes

log = logging.getLogger("ddpjob.local.run.supervisor")

SWITCH_ENV = "DDPJOB_PRELOAD"
ZYGOTE_MODULE = "ddpjob_runtime.localkit.zygote"
STOP_GRACE_S = 5.0
HASH_SEED_ENV = "PYTHONHASHSEED"
SOCKET_NAME = "template.sock"
USER_BASE_ENV = "PYTHONUSERBASE"
_OFF = ("0", "false", "no", "off")


def user_python() -> dict[str, str]:
    """`PYTHONUSERBASE` as `site` finds it here (where `pip install --user` put packages, maybe
    ddpjob's own), for interpreters whose HOME is another. A job's template is started with it
    too: a process it forks sees the packages a fresh one would, and their start-up settings
    match (`ddpjob_runtime.localkit.spares.startup_environment`)."""
    return {USER_BASE_ENV: os.environ.get(USER_BASE_ENV) or site.getuserbase()}




def environment(seed: str | None) -> dict[str, str]:
    """This process's environment with the job's `PYTHONHASHSEED` where it sets one and the
    user base the hosts get (`user_python`): what a template (or a pool's keeper,
    which starts one) is started with."""
    return {**os.environ, **user_python(),
            **({HASH_SEED_ENV: seed} if seed is not None else {})}


def enabled() -> bool:
    """Whether local jobs fork their processes from a template (`DDPJOB_PRELOAD`, default on;
    Linux only: it needs `pidfd_open` and SCM_RIGHTS)."""
    switch = os.environ.get(SWITCH_ENV, "").strip().lower()
    return switch not in _OFF and sys.platform.startswith("linux")


class Template:
    """One template process, started by `start` and ended by `stop`, with the str hash seed
    `seed` fixes (None: a random one, or this process's `PYTHONHASHSEED`); with `spares` it
    keeps spare worker interpreters (`ddpjob_runtime.localkit.spares`: a warm pool's)."""

    def __init__(self, folder: Path, log_file: Path, seed: str | None = None,
                 spares: bool = False):
        self.folder, self.log_file, self.seed, self.spares = folder, log_file, seed, spares
        self.proc: subprocess.Popen | None = None
        self.name = ""

    def start(self) -> str:
        """Start the template (its command line names `folder`, and so do those of the
        processes forked from it); returns the name its clients connect to (`DDPJOB_ZYGOTE`).
        A template still running from the job's last attempt is kept: it runs no job code."""
        if self.running_pid() is not None:
            return self.name
        path = self.folder / SOCKET_NAME
        path.unlink(missing_ok=True)  # an earlier template's, gone
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            forkrun.reach(listener, str(path), bind=True)
            ends_with_us = processes.ends_with_this_process()

            def in_the_template() -> None:  # its pid and uid become the socket's credentials
                ends_with_us()
                listener.listen(socket.SOMAXCONN)

            with open(self.log_file, "ab") as out:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", ZYGOTE_MODULE, str(listener.fileno()), str(self.folder),
                     *([contract.ZYGOTE_SPARES_FLAG] if self.spares else [])],
                    pass_fds=[listener.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    env={**environment(self.seed), "PYTHONUNBUFFERED": "1"},
                    preexec_fn=in_the_template,
                )  # fmt: skip
        self.name = forkrun.template_value(self.proc.pid, str(path))
        log.info("started the job's template process (pid %d)", self.proc.pid)
        return self.name

    def running_pid(self) -> int | None:
        """The template's pid while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

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
        (self.folder / SOCKET_NAME).unlink(missing_ok=True)
        self.proc, self.name = None, ""
