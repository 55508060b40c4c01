"""Every private member of torchrun (torch's elastic agent) that ddpjob's agent relies on.

`HOOKS` names them, by feature, so that `borrowed.problems(HOOKS)` (the canary test) says which
moved in a new torch; `install` (`ddpjob_runtime.job.agent`) installs the features whose members
all fit and logs one line for each other one, which then behaves as plain torchrun:

- `STORE`: TCPStore servers listen only on the address they are given (torchrun's listen on
  every interface): a socket bound beforehand goes to the store through `master_listen_fd`.
  The rendezvous store's server is kept, so the first host's agent can wait for the others.
- `FAILURES`: the failures the agent saw (exit code or signal, when) go to `on_failures`.
- `RESTARTS`: between a failed attempt and the next, `between_attempts` runs (the agents agree
  on the cause and checkpoint) and returns the port of a fresh store for the next workers.
- `FORK`: torchrun's start of a worker goes to `start_worker`, with torch's own start as the
  fallback (forking from the job's template instead of starting an interpreter).
"""

from __future__ import annotations

import datetime
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ddpjob_runtime.shared import borrowed
from ddpjob_runtime.shared.borrowed import (
    Hook,
    called,
    exists,
    instance_attribute,
    looked_up,
    overridden,
)

log = logging.getLogger("ddpjob_runtime.job.torch_hooks")

VERSION = f"torch {torch.__version__}"
# torch's libuv store server takes a listening socket from 2.8 on (pytorch#150215); an older
# torch (a SageMaker image's) gets the socket with its classic server.
_LIBUV_TAKES_LISTEN_FD = torch.__version__ >= "2.8"
_ELASTIC = "torch.distributed.elastic"
_API = f"{_ELASTIC}.agent.server.api"
_AGENT = f"{_ELASTIC}.agent.server.local_elastic_agent:LocalElasticAgent"
_LAUNCH = "torch.distributed.launcher.api:launch_agent"
_STATIC = f"{_ELASTIC}.rendezvous.static_tcp_rendezvous"
_HANDLERS = f"{_ELASTIC}.multiprocessing.subprocess_handler.handlers"
_HANDLER = f"{_ELASTIC}.multiprocessing.subprocess_handler.subprocess_handler:SubprocessHandler"
DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)

STORE = Hook("loopback-only stores", (
    called("torch.distributed:TCPStore.__init__", "host_name", "port", "world_size", "is_master",
           "timeout", "wait_for_workers", "multi_tenant", "master_listen_fd", "use_libuv"),
    looked_up(f"{_STATIC}:StaticTCPRendezvous.next_rendezvous", "TCPStore"),
), "torchrun's stores (listening on every interface; the agents leave in any order)")
_ATTEMPT = (instance_attribute(_AGENT, "_worker_group"),
            instance_attribute(_AGENT, "_remaining_restarts"),
            looked_up(_LAUNCH, "LocalElasticAgent"))
FAILURES = Hook("agent failure records", (
    overridden(f"{_AGENT}._monitor_workers", "worker_group"),
    called(f"{_API}:RunResult.is_failed"),
    called(f"{_ELASTIC}.multiprocessing.errors:ProcessFailure.signal_name"),
    *_ATTEMPT,
), "torchrun's agent (a rank that did not record its own failure is not named)")
RESTARTS = Hook("coordinated restarts", (
    overridden(f"{_AGENT}._restart_workers", "worker_group"),
    overridden(f"{_AGENT}._rendezvous", "worker_group"),
    called(f"{_AGENT}._stop_workers", "worker_group"),
    called(f"{_AGENT}._initialize_workers", "worker_group"),
    exists(f"{_API}:WorkerState.STOPPED"),
    *(instance_attribute(f"{_API}:WorkerGroup", name) for name in (
        "spec", "store", "group_rank", "group_world_size", "master_addr", "master_port")),
    *_ATTEMPT,
), "torchrun's own restarts (each host alone, no agreed cause or checkpoint, in the old store "
   "where gloo may find the last attempt's addresses)")
FORK = Hook("forked workers", (
    looked_up(f"{_HANDLERS}:get_subprocess_handler", "SubprocessHandler"),
    overridden(f"{_HANDLER}._popen", "args", "env"),
    instance_attribute(_HANDLER, "_stdout"),
    instance_attribute(_HANDLER, "_stderr"),
), "torchrun's own start of each worker (its forkrun client asks the template)")
HOOKS = (STORE, FAILURES, RESTARTS, FORK)

_servers: list[dist.TCPStore] = []  # the store servers this agent holds, the rendezvous's first
_attempt_stores: list[dist.TCPStore] = []  # kept alive until this agent leaves


def _listening_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    return sock


class BoundTCPStore(dist.TCPStore):
    """A TCPStore whose server listens on `host_name` only, not on every interface."""

    def __init__(
        self,
        host_name: str,
        port: int,
        world_size: int | None = None,
        is_master: bool = False,
        timeout: datetime.timedelta = DEFAULT_TIMEOUT,
        wait_for_workers: bool = True,
        multi_tenant: bool = False,
        master_listen_fd: int | None = None,
        use_libuv: bool = True,
    ) -> None:
        if is_master and master_listen_fd is None:
            try:
                sock = _listening_socket(host_name, port)
            except OSError as exc:  # not an address of this host: torchrun's own behaviour
                log.warning("store on %s:%d listens on every interface (%s)", host_name, port, exc)
            else:
                port, master_listen_fd = sock.getsockname()[1], sock.detach()
        if master_listen_fd is not None and not _LIBUV_TAKES_LISTEN_FD:
            use_libuv = False
        super().__init__(
            host_name, port, world_size, is_master, timeout, wait_for_workers, multi_tenant,
            master_listen_fd, use_libuv,
        )  # fmt: skip
        if is_master:
            _servers.append(self)


def rendezvous_store() -> dist.TCPStore | None:
    """The rendezvous store whose server this agent holds (None: another host's, or `STORE`
    is not installed)."""
    return _servers[0] if _servers else None


def fresh_store(host: str) -> int:
    """A fresh store server on `host` (a free port), kept until this agent leaves; its port."""
    store = dist.TCPStore(host, 0, None, True, DEFAULT_TIMEOUT, wait_for_workers=False,
                          multi_tenant=True)  # fmt: skip
    _attempt_stores.append(store)
    return store.port


@dataclass(frozen=True)
class Attempt:
    """What torchrun's agent knows when it restarts its workers, for `between_attempts`."""

    store: dist.Store  # the rendezvous store
    number: int  # the attempt about to start (1: the first restart)
    max_restarts: int
    node_rank: int
    nnodes: int
    master_addr: str


OnFailures = Callable[[Mapping[int, object], int], None]  # ProcessFailure by rank, attempt
BetweenAttempts = Callable[[Attempt], int]  # the next attempt's store port
Popen = Callable[[object, dict[str, str]], object]  # torchrun's own start: (args, env) -> process
StartWorker = Callable[[list[str], dict[str, str], tuple[int, int, int], Popen], object]


def install(on_failures: OnFailures, between_attempts: BetweenAttempts,
            start_worker: StartWorker) -> set[str]:
    """Install the hooks whose members fit this torch (one warning per other one); the names
    of those installed. Call it before torchrun runs."""
    usable = borrowed.usable(HOOKS, VERSION)
    if STORE.name in usable:
        from torch.distributed.elastic.rendezvous import static_tcp_rendezvous

        dist.TCPStore = static_tcp_rendezvous.TCPStore = BoundTCPStore
    methods = {**(_failure_methods(on_failures) if FAILURES.name in usable else {}),
               **(_restart_methods(between_attempts) if RESTARTS.name in usable else {})}
    if methods:
        from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
        from torch.distributed.launcher import api

        api.LocalElasticAgent = type("DdpjobAgent", (LocalElasticAgent,), methods)
    if FORK.name in usable:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import handlers

        handlers.SubprocessHandler = _forking_handler(handlers.SubprocessHandler, start_worker)
    return usable


def _attempt(agent: object) -> int:
    return agent._worker_group.spec.max_restarts - agent._remaining_restarts  # type: ignore[attr-defined]


def _failure_methods(on_failures: OnFailures) -> dict[str, object]:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    def _monitor_workers(self, worker_group):  # noqa: ANN001, ANN202 - torch's signature
        result = LocalElasticAgent._monitor_workers(self, worker_group)
        if result.is_failed():
            on_failures(result.failures, _attempt(self))
        return result

    return {"_monitor_workers": _monitor_workers}


def _restart_methods(between_attempts: BetweenAttempts) -> dict[str, object]:
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    def _restart_workers(self, worker_group):  # noqa: ANN001, ANN202 - torch's signature
        self._stop_workers(worker_group)
        worker_group.state = WorkerState.STOPPED
        self._attempt_port = between_attempts(Attempt(
            worker_group.store, _attempt(self), worker_group.spec.max_restarts,
            worker_group.group_rank, worker_group.group_world_size, worker_group.master_addr))
        self._initialize_workers(worker_group)

    def _rendezvous(self, worker_group):  # noqa: ANN001, ANN202
        LocalElasticAgent._rendezvous(self, worker_group)
        if self._attempt_port is not None:  # this attempt's workers meet in a fresh store
            worker_group.master_port = self._attempt_port

    return {"_attempt_port": None, "_restart_workers": _restart_workers,
            "_rendezvous": _rendezvous}


def _forking_handler(handler: type, start_worker: StartWorker) -> type:
    class ForkingHandler(handler):
        def _popen(self, args, env):  # noqa: ANN001, ANN202 - torch's signature
            stdio = (0, *(out.fileno() if out else fd for out, fd in ((self._stdout, 1),
                                                                     (self._stderr, 2))))
            return start_worker(args, env, stdio, super()._popen)

    return ForkingHandler
