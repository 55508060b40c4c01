"""`python -m ddpjob_runtime.forkrun MODULE [ARGS...]`: run `python -m MODULE ARGS` as a child of
the job's template process (`ddpjob_runtime.zygote`), which has torch imported already.

This client imports neither torch nor the rest of the runtime (it starts in tens of
milliseconds). It hands the template its argv, environment, working folder and stdin/stdout/
stderr (SCM_RIGHTS over the template's unix socket); the template forks a child that becomes
`python -m MODULE` in this process's mount namespace. The client then stands for that child: a
signal it receives is relayed to the child's process group, and it exits as the child did (the
same code, or killed by the same signal), so the launcher that started it (torchrun, the
bootstrap) supervises, stops and kills it as it would the real process. When the client dies
(SIGKILL included) the template kills the child.

Where no template is named (`DDPJOB_ZYGOTE` unset) or it cannot serve, the client becomes
`python -m MODULE` itself (exec), as without templates.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import socket
import sys

from ddpjob_runtime import contract

_RELAYED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2)
_MAX_MESSAGE = 1 << 16
_PR_SET_PDEATHSIG, _PR_GET_PDEATHSIG = 1, 2


def address(name: str) -> str:
    """The socket address of the template named `name` ("@x" is the abstract name "\\0x")."""
    return "\0" + name[1:] if name.startswith("@") else name


def _exec_here(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", *argv])


def _connect(name: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(address(name))
    except OSError:
        sock.close()
        return None
    return sock


def _die_with_launcher() -> None:
    """Unless the launcher chose a signal for its death, SIGKILL: no forked process outlives
    its launcher (when this client dies, the template kills the process it stands for)."""
    libc = ctypes.CDLL(None, use_errno=True)
    chosen = ctypes.c_int(0)
    if libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(chosen), 0, 0, 0) == 0 and not chosen.value:
        launcher = os.getppid()
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(128 + signal.SIGKILL)


def _exit_as(status: int) -> None:
    """Exit as the child did (`status` from waitpid): its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child dumped already, if at all
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def run(argv: list[str]) -> None:
    """Run `python -m argv[0] argv[1:]` forked from the template; never returns."""
    name = os.environ.get(contract.ENV_ZYGOTE)
    sock = _connect(name) if name else None
    if sock is None:
        _exec_here(argv)
    _die_with_launcher()
    pending: list[int] = []
    child: list[int] = []

    def relay(signum: int, _frame: object) -> None:
        if not child:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child[0], signum)

    for signum in _RELAYED:
        signal.signal(signum, relay)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    try:
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
        first = sock.recv(_MAX_MESSAGE)
    except OSError:
        first = b""
    if not first.startswith(b"R"):  # refused, or it failed to set the child up: run it here
        sock.close()
        for signum in _RELAYED:
            signal.signal(signum, signal.SIG_DFL)
        if first:
            sys.stderr.write(f"ddpjob_runtime.forkrun: {first[1:].decode(errors='replace')}\n")
            sys.stderr.flush()
        _exec_here(argv)
    child.append(int(first[1:]))
    for signum in pending:
        relay(signum, None)
    while True:
        try:
            message = sock.recv(_MAX_MESSAGE)
        except InterruptedError:
            continue
        if message.startswith(b"X"):
            _exit_as(int(message[1:]))
        if not message:  # the template died: so did the child (it dies with the template)
            os._exit(128 + signal.SIGKILL)


def main() -> None:
    """Console entry: `python -m ddpjob_runtime.forkrun MODULE [ARGS...]`."""
    if len(sys.argv) < 2:
        sys.exit("usage: python -m ddpjob_runtime.forkrun MODULE [ARGS...]")
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
