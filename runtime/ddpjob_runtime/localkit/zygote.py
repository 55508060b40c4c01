"""The template process of a local job: torch and the runtime imported once, processes forked.

`python -m ddpjob_runtime.localkit.zygote FD FOLDER` serves the listening unix socket `FD`
(inherited from the supervisor, which made it before any host started; FOLDER, the job's, only names
it in `ps`, for it and the processes forked from it). It imports torch and the runtime's own modules
— never user code — and stays single-threaded: nothing runs a torch op, OpenMP is not initialised,
OpenBLAS gets one thread. For each client (`ddpjob_runtime.shared.forkrun`) it forks a child that
becomes `python -m MODULE ARGS` with the client's environment, working folder, stdin/stdout/stderr
and argv, in its own session, in the client's mount namespace (a local host's own `/opt/ml`, entered
with `setns`) and with the client's capabilities (what the host gave up as it started stays given
up), dying with the template. The template sends the client `R<pid>` once the child is set up
(`F<reason>` when it could not be) and `X<wait status>` when it exits; when the client goes away
first, the child's process group is killed.

A worker (`OWN_INTERPRETER`: the process that runs user code) is not forked but answered `P`
(start it as an interpreter of its own), unless the template's `PYTHONHASHSEED` fixes a str
hash seed and the request's `PYTHON*` variables are the template's (the same seed, and no
start-up setting a fork would ignore): on SageMaker each rank is its own interpreter, with its
own hash seed (so its own set iteration order) and object addresses, and ranks forked from one
template would share them (a job whose ranks must agree on a set's order would pass here and
hang there). With a seed fixed by the job every interpreter has it, forked or not. A warm
pool's template hands such a request to a spare interpreter (`ddpjob_runtime.localkit.spares`).

The template dies with the supervisor (PDEATHSIG); on SIGTERM it kills its children's groups
and exits. It is the subreaper of every process forked from it (`ddpjob_runtime.localkit.orphans`):
what those leave behind, however detached, stays below it until the job's end ends it.
Children share the template's imported modules (that is the point), its hash seed and
OpenBLAS's single thread; everything else is the client's.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import traceback

from ddpjob_runtime.localkit import childsetup, cpython_hooks
from ddpjob_runtime.localkit.forkrequest import Request, request_of
from ddpjob_runtime.localkit.orphans import Orphans
from ddpjob_runtime.localkit.spares import Spares, startup_environment, take_one
from ddpjob_runtime.shared import contract, processes, proctitle

log = logging.getLogger("ddpjob_runtime.localkit.zygote")

# What the bootstrap, agents and workers import (not their own modules: those run as
# `__main__`). The agent's loopback-bound store still replaces torchrun's in the modules
# imported here (`torch_hooks.install`).
PRELOADED = ("torch", "torch.distributed", "torch.distributed.run", "torch.nn.parallel",
             "encodings.idna",
             "ddpjob_runtime.platform.environment", "ddpjob_runtime.platform.hosts",
             "ddpjob_runtime.platform.mirrors", "ddpjob_runtime.platform.sourcedir",
             "ddpjob_runtime.platform.sm_variables", "ddpjob_runtime.job.launcher",
             "ddpjob_runtime.job.entrypoint", "ddpjob_runtime.job.restarts",
             "ddpjob_runtime.checkpoints",
             "ddpjob_runtime.dataparallel.torch.distributed",
             "ddpjob_runtime.dataparallel.torch.parallel.distributed")
# Modules that run user code: each an interpreter of its own unless the job fixes the seed.
OWN_INTERPRETER = ("ddpjob_runtime.job.worker",)
_MAX_REQUEST = 1 << 20


def fixed_hash_seed(value: str | None) -> int | None:
    """The str hash seed `PYTHONHASHSEED=value` fixes; None where each interpreter draws its
    own (unset, "random")."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _peer(conn: socket.socket) -> int:
    """The pid of the process that connected `conn`."""
    return int.from_bytes(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)[:4],
                          "little")


def _close(conn: socket.socket, fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    conn.close()


def _refuse(conn: socket.socket, fds: list[int], reason: str) -> None:
    """Tell the client why its request is refused (`F`), and close it and its fds."""
    log.warning("refused a request: %s", reason)
    for fd in fds:  # first: a client that has the answer knows they are closed
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.send(f"F{reason}".encode())
    conn.close()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as file:
        stat = file.read()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _set_up_child(request: Request, fds: list[int], peer: int) -> None:
    """In the forked child: the client's session, namespace, folder and stdio."""
    os.setsid()
    childsetup.enter_namespaces(peer)
    childsetup.take_capabilities(peer)
    os.chdir(request.cwd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)


def _become(request: Request, base_path: list[str]) -> None:
    """Run the request's module as `__main__` with its environment and argv (in the child)."""
    os.environ.clear()
    os.environ.update(request.env)
    tempfile.tempdir = None  # found again from the request's TMPDIR
    extra = [p for p in request.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request.cwd, *extra, *base_path]
    importlib.invalidate_caches()  # drops relative entries, rereads the folders' contents
    random = sys.modules.get("numpy.random")  # not `numpy.random`: that would import it
    if random is not None:  # fresh entropy, as a fresh interpreter would have
        random.seed()
    sys.argv = [request.argv[0], *request.argv[1:]]
    proctitle.show([sys.executable, "-m", *request.argv], request.env)
    runpy.run_module(request.argv[0], run_name="__main__", alter_sys=True)


class Template:
    """The serving loop: one fork per request, exit statuses back to the clients; a worker's
    request goes to a spare interpreter where the template keeps `spares`."""

    def __init__(self, listener: socket.socket, hash_seed: int | None = None,
                 spares: Spares | None = None):
        self.listener, self.spares = listener, spares
        self.hash_seed = hash_seed  # the seed this template's PYTHONHASHSEED fixed, if any
        self.startup = startup_environment(os.environ)  # before `preload` changes it
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (client, pidfd)
        self.orphans: Orphans | None = None  # a template's (`main`), not a spare's

    def serve(self) -> Request:
        """Serve until SIGTERM (then exit); returns only in a forked child, its request."""
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    self._accept()
                elif self.orphans is not None and key.fileobj is self.orphans.sock:
                    self.orphans.drain()
                elif (request := self._dispatch(key)) is not None:
                    return request
            if self.orphans is not None:  # those the template tracks it reaps itself
                self.orphans.reap(set(self.children) | (self.spares.pids() if self.spares
                                                        else set()))

    def serve_spare(self) -> Request:
        """As a spare (`listener`: its channel to the template): fork the one worker handed
        over, relay its exit, then exit; returns only in the forked worker, its request."""
        taken = take_one(self.listener)
        request = taken and self._parse(*taken)
        if request is not None and (child := self._fork(taken[0], request, taken[2],
                                                        _peer(taken[0]))) is not None:
            return child
        while self.children:
            for key, _ in self.selector.select():
                self._dispatch(key)
        os._exit(0)

    def _dispatch(self, key: selectors.SelectorKey) -> Request | None:
        kind, value = key.data
        if kind == "spare" and self.spares is not None:
            self.spares.heard(value)
            return None
        return (self._read_request(key.fileobj) if kind == "new" else
                self._client_gone(value) if kind == "client" else self._exited(value))

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError as exc:  # out of fds, a client gone already: the template serves on
            log.warning("could not accept a client: %s", exc)
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid = int.from_bytes(creds[:4], "little"), int.from_bytes(creds[4:8], "little")
        if uid not in (os.getuid(), 0):
            log.warning("refused a client of uid %d", uid)
            conn.close()
            return
        self.selector.register(conn, selectors.EVENT_READ, ("new", pid))

    def _read_request(self, conn: socket.socket) -> Request | None:
        peer = self.selector.get_key(conn).data[1]
        self.selector.unregister(conn)
        try:
            message, fds, flags, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
        except OSError as exc:
            log.warning("a bad request from pid %d: %s", peer, exc)
            conn.close()
            return None
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 3:
            _refuse(conn, fds, f"a request is at most {_MAX_REQUEST} bytes with 3 fds "
                               f"(stdin, stdout, stderr); pid {peer} sent more, or fewer fds")
            return None
        request = self._parse(conn, message, fds)
        if request is None or self._forks(request):
            return request and self._fork(conn, request, fds, peer)
        if self.spares is None or not self.spares.hand_over(message, request.env, conn, fds):
            with contextlib.suppress(OSError):
                conn.send(b"P")  # a worker: as an interpreter of its own
        _close(conn, fds)
        return None

    @staticmethod
    def _parse(conn: socket.socket, message: bytes, fds: list[int]) -> Request | None:
        """The request in `message`; None (and `conn` and `fds` closed) when it is none."""
        try:
            return request_of(message)
        except ValueError as exc:
            _refuse(conn, fds, f"a bad request: {exc}")
            return None

    def _forks(self, request: Request) -> bool:
        """Whether this request's process may be forked: it runs no user code, or the job
        fixed the hash seed this template has (as every interpreter of the job would) and
        asks for no other start-up setting than the template's (`PYTHONWARNINGS`, ...)."""
        return request.argv[:1] != [] and request.argv[0] not in OWN_INTERPRETER or (
            self.hash_seed is not None and startup_environment(request.env) == self.startup)

    def _fork(self, conn: socket.socket, request: Request, fds: list[int],
              peer: int) -> Request | None:
        threads = len(os.listdir("/proc/self/task"))
        pid = os.fork() if threads == 1 and len(fds) == 3 else -1
        if pid == 0:
            return self._child(conn, request, fds, peer)
        for fd in fds:
            os.close(fd)
        if pid == -1:
            with contextlib.suppress(OSError):
                conn.send(f"Fthe template has {threads} threads: not forking".encode())
            conn.close()
            return None
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd)
        self.selector.register(conn, selectors.EVENT_READ, ("client", pid))
        self.selector.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        return None

    def _child(self, conn: socket.socket, request: Request, fds: list[int],
               peer: int) -> Request:
        Orphans.forget()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        processes.die_with_parent(signal.SIGKILL)  # no child outlives the template
        try:
            _set_up_child(request, fds, peer)
            launcher = request.launcher or _parent(peer)
        except OSError as exc:
            with contextlib.suppress(OSError):
                conn.send(f"Fthe template could not set the process up: {exc}".encode())
            os._exit(125)
        conn.send(f"R{os.getpid()}".encode())
        request.env[contract.ENV_LAUNCHER] = str(launcher)
        for sock in [conn, self.listener, *(c for c, _ in self.children.values()),
                     *([self.orphans.sock] if self.orphans else [])]:
            sock.close()
        self.selector.close()
        for fd in (int(name) for name in os.listdir("/proc/self/fd")):
            if fd > 2:  # the children's pidfds, anything torch's import opened
                with contextlib.suppress(OSError):
                    os.close(fd)
        return request

    def _client_gone(self, pid: int) -> None:
        """The client closed its end before the child exited: the child goes too."""
        conn, _ = self.children[pid]
        self.selector.unregister(conn)
        conn.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)

    def _exited(self, pid: int) -> None:
        conn, pidfd = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        if conn.fileno() != -1:
            with contextlib.suppress(OSError):
                conn.send(f"X{status}".encode())
            self.selector.unregister(conn)
            conn.close()

    def stop(self, _signum: int = 0, _frame: object = None) -> None:
        """Kill every child's process group, and the spares, and exit."""
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        if self.spares is not None:
            self.spares.stop()
        os._exit(0)


def preload() -> None:
    """Import what every agent and worker imports, single-threaded (OpenBLAS: one thread), and
    keep the children from writing to (so copying) the imported objects' pages when they
    collect garbage (`gc.freeze`) or exit: torch's operator libraries have exit finalizers
    that undo their registrations, thousands of page copies per child for nothing, as a
    child leaves with `os._exit` (`_exit`)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    gc.disable()  # nothing to collect while importing: a pass would only cost time
    for name in PRELOADED:
        importlib.import_module(name)
    cpython_hooks.check()
    cpython_hooks.keep_finalizers_from_exit()
    gc.freeze()
    gc.enable()


def main(argv: list[str]) -> None:
    """`python -m ddpjob_runtime.localkit.zygote FD FOLDER [--spares | --spare]`: serve the
    listening socket FD (keeping spare worker interpreters), or as a spare, its channel FD."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spare = argv[2:] == [contract.ZYGOTE_SPARE_FLAG]
    proctitle.set_title(contract.ZYGOTE_SPARE_ROLE if spare else "template", *argv[1:2])
    listener = socket.socket(fileno=int(argv[0]))
    template = Template(listener, fixed_hash_seed(os.environ.get("PYTHONHASHSEED")))
    if argv[2:] == [contract.ZYGOTE_SPARES_FLAG]:  # its environment before `preload`'s
        template.spares = Spares(argv[1], dict(os.environ), template.selector)
    if not spare:
        template.orphans = Orphans()
        template.selector.register(template.orphans.sock, selectors.EVENT_READ, None)
    signal.signal(signal.SIGTERM, template.stop)
    pythonpath = set(os.environ.get("PYTHONPATH", "").split(os.pathsep))
    base_path = [p for p in sys.path[1:] if p not in pythonpath]
    preload()
    request = template.serve_spare() if spare else template.serve()
    logging.root.handlers.clear()
    cpython_hooks.exit_now(_run(request, base_path))  # without tearing the preloaded down


def _run(request: Request, base_path: list[str]) -> int:
    """Run the request in this forked child; the exit code Python's own exit would have."""
    try:
        _become(request, base_path)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return (exc.code or 0) & 0xFF
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except BaseException:  # noqa: B036 - as the interpreter would report it
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    main(sys.argv[1:])
