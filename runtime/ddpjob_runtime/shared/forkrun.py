"""`python -m ddpjob_runtime.shared.forkrun MODULE [ARGS...]`: run `python -m MODULE ARGS` as a
child of the job's template process (`ddpjob_runtime.localkit.zygote`), torch already imported.

This client imports neither torch nor the rest of the runtime (it starts in tens of
milliseconds). It hands the template its argv, environment, working folder and stdin/stdout/
stderr (SCM_RIGHTS over the template's unix socket); the template forks a child that becomes
`python -m MODULE` in this process's mount namespace. The client then stands for that child: a
signal it receives is relayed to the child's process group, and it exits as the child did (the
same code, or killed by the same signal), so the launcher that started it (torchrun, the
bootstrap) supervises, stops and kills it as it would the real process. When the client dies
(SIGKILL included) the template kills the child.

Where no template is named (`DDPJOB_ZYGOTE` unset), it cannot serve, or it answers that the
module runs as an interpreter of its own (a worker: its own str hash seed, as on SageMaker),
the client becomes `python -m MODULE` itself (exec), as without templates.

`DDPJOB_ZYGOTE` is `PID:PATH`: the template's pid and its socket, in the job's (or warm pool's)
private folder. Before it sends anything (its environment holds the job's secrets) the client
checks who serves the socket (SO_PEERCRED): this user, and the template's process itself (the
template calls `listen`, so a process that took the socket over has other credentials). A
template that is gone (nothing listens) is no danger: the client runs the module itself. One
that is not the template is refused loudly (`UntrustedTemplateError`; a client exits
`REFUSED_EXIT` with the reason on stderr and in the host's `output/failure`): running the
module anyway would hide that someone serves the job's socket.

A process that is itself forked from the template (a host's runtime, torchrun's agent) asks the
template directly instead (`fork`: no client, an interpreter less per process) and holds a
`Forked` handle, `subprocess.Popen`'s part that the launcher and torchrun use.

The client is cheap to start: `command()` runs this file by path in an isolated interpreter
without `site` (`-I -S`: the venv's `.pth` hooks alone cost more than the client's work), and it
imports neither `socket`, `signal` nor `json` (their enum classes and `re` double its start) but
their C modules.
"""

from __future__ import annotations

import _signal
import _socket
import ctypes
import os
import struct
import sys
from _json import encode_basestring_ascii as _quoted  # json's own, without json's `re`

if not __package__:  # run by path (`command()`): ddpjob_runtime is two folders above this file
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ddpjob_runtime.shared import contract  # noqa: E402

_RELAYED = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGUSR1,
            _signal.SIGUSR2)
_MAX_MESSAGE = 1 << 16
_PR_SET_PDEATHSIG, _PR_GET_PDEATHSIG = 1, 2
REFUSED_EXIT = 125  # a client that refused its template's socket: the module never started


class UntrustedTemplateError(RuntimeError):
    """`DDPJOB_ZYGOTE` names no template to trust: it is malformed, or a process other than the
    template it names serves its socket (nothing was sent to that process)."""


def command(module: str) -> list[str]:
    """The command line of a client that runs `python -m module` forked from the template
    (arguments may follow)."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), module]


def template_value(pid: int, path: str) -> str:
    """`DDPJOB_ZYGOTE` for the template `pid` that serves the unix socket `path`."""
    return f"{pid}:{path}"


def reach(sock: _socket.socket, path: str, bind: bool = False) -> None:
    """Connect `sock` (or `bind` it) to the unix socket `path` through an O_PATH fd of its
    folder (`/proc/self/fd/N/NAME`): an address holds at most 107 bytes, a home's path may not
    fit."""
    folder = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    try:
        (sock.bind if bind else sock.connect)(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)


def request_message(argv: list[str], env: dict[str, str], cwd: str,
                    launcher: int | None = None) -> bytes:
    """What the client sends the template: `json.dumps({"argv", "env", "cwd"})`, encoded;
    with `launcher` (the pid of a process asking for itself, not a client) also that."""
    def strings(items: list[str]) -> str:
        return ", ".join(map(_quoted, items))

    pairs = ", ".join(f"{_quoted(k)}: {_quoted(v)}" for k, v in env.items())
    mine = "" if launcher is None else f', "launcher": {int(launcher)}'
    return (f'{{"argv": [{strings(argv)}], "env": {{{pairs}}}, "cwd": {_quoted(cwd)}{mine}}}'
            ).encode()


def module_of(cmd: list[str] | tuple[str, ...]) -> list[str] | None:
    """`[MODULE, ARGS...]` where `cmd` is a client's command line (`command(MODULE) + ARGS`)."""
    prefix = command("")[:-1]
    return list(cmd[len(prefix):]) if list(cmd[:len(prefix)]) == prefix else None


def plain_command(argv: list[str]) -> list[str]:
    """`python -m argv[0] argv[1:]` as an interpreter of its own: where the template does not
    fork the process (what the client does then, without asking the template twice)."""
    return [sys.executable, "-m", *argv]


def plain_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` for a process started as an interpreter of its own: without `DDPJOB_LAUNCHER`,
    which a forked launcher (a host's runtime, an agent) has of its own (its parent is the
    template), where the process's parent is its launcher."""
    return {k: v for k, v in env.items() if k != contract.ENV_LAUNCHER}


def _exec_here(argv: list[str]) -> None:
    os.execve(sys.executable, plain_command(argv), plain_environment(dict(os.environ)))


def _connect(value: str) -> _socket.socket | None:
    """A connection to the template `value` (`DDPJOB_ZYGOTE`) names, its server checked; None
    where nothing listens there (the template is gone). UntrustedTemplateError where the value
    is malformed, or the socket's server is not the template (another pid or user)."""
    pid, sep, path = value.partition(":")
    if not (sep and pid.isascii() and pid.isdigit() and path.startswith("/")):
        raise UntrustedTemplateError(
            f"{contract.ENV_ZYGOTE} must be PID:/PATH/OF/SOCKET, got {value!r}")
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        reach(sock, path)
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    except OSError:
        sock.close()
        return None
    server = struct.unpack("iII", creds)[:2]  # the listening process's pid and uid
    if server != (int(pid), os.getuid()):
        sock.close()
        raise UntrustedTemplateError(
            f"the template socket {path} is served by pid {server[0]} of uid {server[1]}, not "
            f"by the template (pid {pid} of uid {os.getuid()}): refused, nothing was sent")
    return sock


def _ask(sock: _socket.socket, request: bytes, stdio: tuple[int, int, int]) -> int | None:
    """Send the request and the stdio fds (what socket.send_fds does); the forked child's pid,
    or None when the template refused or could not set it up (its reason on stderr), or said
    the module is to run as an interpreter of its own (`P`: a rank that runs user code)."""
    try:
        fds = struct.pack("3i", *stdio)
        sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        first = sock.recv(_MAX_MESSAGE)
    except OSError:
        first = b""
    if first.startswith(b"R"):
        return int(first[1:])
    sock.close()
    if first.startswith(b"F"):
        sys.stderr.write(f"ddpjob_runtime.shared.forkrun: {first[1:].decode(errors='replace')}\n")
        sys.stderr.flush()
    return None


class Forked:
    """A process the template forked at this process's request: its `pid` (also its process
    group), `args`, `returncode`, `poll()` and `wait()` as `subprocess.Popen` has them. It is
    killed, group and all, when this process closes the connection or dies."""

    def __init__(self, sock: _socket.socket, pid: int, args: list[str]):
        self.pid, self.args, self.returncode = pid, args, None
        self._sock = sock

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self._receive(0.0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code; `subprocess.TimeoutExpired` after `timeout` seconds."""
        code = self._receive(timeout)
        if code is None:
            import subprocess  # loaded already in the processes that hold a Forked

            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def _receive(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self._sock.settimeout(timeout)
            try:
                message = self._sock.recv(_MAX_MESSAGE)
            except (BlockingIOError, TimeoutError):
                return None
            except OSError:
                message = b""
            # No message: the template died, and the child with it.
            self.returncode = os.waitstatus_to_exitcode(int(message[1:])) \
                if message.startswith(b"X") else -_signal.SIGKILL
            self._sock.close()
        return self.returncode


def fork(argv: list[str], env: dict[str, str], cwd: str,
         stdio: tuple[int, int, int] = (0, 1, 2)) -> Forked | None:
    """`python -m argv[0] argv[1:]` forked from the job's template (`env`'s `DDPJOB_ZYGOTE`) for
    this process, which must stay alive as long as the child should; None where no template
    serves it (start it some other way). UntrustedTemplateError where another process serves
    the template's socket (`env` was not sent to it)."""
    name = env.get(contract.ENV_ZYGOTE)
    sock = _connect(name) if name else None
    pid = sock and _ask(sock, request_message(argv, env, cwd, os.getpid()), stdio)
    return Forked(sock, pid, argv) if pid else None


def _die_with_launcher() -> None:
    """Unless the launcher chose a signal for its death, SIGKILL: no forked process outlives
    its launcher (when this client dies, the template kills the process it stands for)."""
    libc = ctypes.CDLL(None, use_errno=True)
    chosen = ctypes.c_int(0)
    if libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(chosen), 0, 0, 0) == 0 and not chosen.value:
        launcher = os.getppid()
        libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(128 + _signal.SIGKILL)


def _exit_as(status: int) -> None:
    """Exit as the child did (`status` from waitpid): its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        import resource  # only on this path

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child dumped already, if at all
        if signum not in (_signal.SIGKILL, _signal.SIGSTOP):
            _signal.signal(signum, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _refuse(reason: str) -> None:
    """Exit `REFUSED_EXIT` with `reason` on stderr and, in a host (`output/` of its root
    exists), as its failure unless one was written already: the job fails saying why."""
    line = f"ddpjob_runtime.shared.forkrun: {reason}"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    root = os.environ.get(contract.ENV_ROOT) or contract.DEFAULT_ROOT
    try:  # `failure.FAILURE_FILE` (that module's imports would slow the client)
        out = os.open(os.path.join(root, contract.OUTPUT_DIR, "failure"),
                      os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(out, line.encode(errors="replace"))
    except OSError:  # no host's root here, or a failure is recorded already
        pass
    os._exit(REFUSED_EXIT)


def run(argv: list[str]) -> None:
    """Run `python -m argv[0] argv[1:]` forked from the template; never returns."""
    name = os.environ.get(contract.ENV_ZYGOTE)
    try:
        sock = _connect(name) if name else None
    except UntrustedTemplateError as exc:
        _refuse(str(exc))
    if sock is None:
        _exec_here(argv)
    _die_with_launcher()
    pending: list[int] = []
    child: list[int] = []

    def relay(signum: int, _frame: object) -> None:
        if not child:
            pending.append(signum)
            return
        try:  # noqa: SIM105 - contextlib's imports would slow the client's start
            os.killpg(child[0], signum)
        except ProcessLookupError:
            pass

    for signum in _RELAYED:
        _signal.signal(signum, relay)
    pid = _ask(sock, request_message(argv, dict(os.environ), os.getcwd()), (0, 1, 2))
    if pid is None:  # refused, or it failed to set the child up: run it here
        for signum in _RELAYED:
            _signal.signal(signum, _signal.SIG_DFL)
        _exec_here(argv)
    child.append(pid)
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
            os._exit(128 + _signal.SIGKILL)


def main() -> None:
    """Console entry: `python -m ddpjob_runtime.shared.forkrun MODULE [ARGS...]`."""
    if len(sys.argv) < 2:
        sys.exit("usage: python -m ddpjob_runtime.shared.forkrun MODULE [ARGS...]")
    run(sys.argv[1:])


if __name__ == "__main__":
    main()
