"""torchrun as the bootstrap runs it: `python -m ddpjob_runtime.agent <torchrun arguments>`.

It is torchrun (`torch.distributed.run`) with four additions:

- Its TCPStore servers listen only on the address they are given (loopback for local jobs):
  torchrun would listen on every interface; a socket bound beforehand is handed to the store
  through TCPStore's own `master_listen_fd`.
- The agent that holds the rendezvous store (the first host's) leaves only after the other
  agents left, so that no agent loses the store in torchrun's exit barrier.
- The failures torchrun saw (exit code or signal, when) are recorded for the bootstrap, next to
  the ranks' own records, so a killed rank is named like one that raised.
- Worker restarts (`--max_restarts`) agree across hosts on the cause and the checkpoint to
  resume from, and give each attempt's workers a fresh store (`ddpjob_runtime.restarts`).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import sys
import time

import torch.distributed as dist

from ddpjob_runtime import failure, forkrun, proctitle, restarts

log = logging.getLogger("ddpjob_runtime.agent")

LEFT_KEY = "ddpjob/agents_left"
# How long the store's agent waits for the others once it is done itself.
LEAVE_WAIT_S = 30.0
_CLIENT_TIMEOUT = datetime.timedelta(seconds=5)
_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)
_servers: list[dist.TCPStore] = []  # kept alive until this agent leaves
_TORCHRUN_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher",
                     "torch.distributed.run")


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
        timeout: datetime.timedelta = _DEFAULT_TIMEOUT,
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
        super().__init__(
            host_name, port, world_size, is_master, timeout, wait_for_workers, multi_tenant,
            master_listen_fd, use_libuv,
        )  # fmt: skip
        if is_master:
            _servers.append(self)


def _record_child_failures(failures: dict, attempt: int) -> None:
    """One record per failed rank that did not record its own failure (a signal, os._exit)."""
    for rank, process in failures.items():
        if process.signal_name() == "SIGTERM":  # the agent stopped it: another rank failed
            code, what = 128 - process.exitcode, "was stopped by SIGTERM"
        elif process.signal_name() != "<N/A>":
            code, what = 128 - process.exitcode, f"was killed by {process.signal_name()}"
        else:
            code, what = process.exitcode, f"exited with code {process.exitcode}"
        failure.record(
            failure.RankFailure(
                rank, code, f"the worker {what}", time=float(process.timestamp), attempt=attempt
            ),
            keep_existing=True,
        )


def _restarting_agent_class() -> type:
    """torchrun's LocalElasticAgent, recording failures and coordinating restarts."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    class RestartingAgent(LocalElasticAgent):
        _attempt_port: int | None = None  # the workers' store of the current restart

        def _attempt(self) -> int:
            return self._worker_group.spec.max_restarts - self._remaining_restarts

        def _monitor_workers(self, worker_group):  # noqa: ANN001, ANN202 - torch's signature
            result = super()._monitor_workers(worker_group)
            if result.is_failed():
                _record_child_failures(result.failures, self._attempt())
            return result

        def _restart_workers(self, worker_group):  # noqa: ANN001, ANN202
            self._stop_workers(worker_group)
            worker_group.state = WorkerState.STOPPED
            master_addr = worker_group.master_addr
            self._attempt_port = restarts.prepare(
                worker_group.store,
                attempt=self._attempt(),
                max_restarts=worker_group.spec.max_restarts,
                node_rank=worker_group.group_rank,
                nnodes=worker_group.group_world_size,
                new_store_port=lambda: _attempt_store(master_addr),
            ).port
            self._initialize_workers(worker_group)

        def _rendezvous(self, worker_group):  # noqa: ANN001, ANN202
            super()._rendezvous(worker_group)
            if self._attempt_port is not None:
                worker_group.master_port = self._attempt_port

    return RestartingAgent


def _fork_workers() -> None:
    """torchrun starts each worker as a subprocess: where its command is a forkrun client's,
    ask the template for the worker directly instead (an interpreter less per worker, where
    the template forks it: `ddpjob_runtime.zygote`), else start `python -m` it. The worker's
    pid is its process group, as torchrun's start makes it; it is killed when this agent
    dies."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import handlers

    class ForkingHandler(handlers.SubprocessHandler):
        def _popen(self, args, env):  # noqa: ANN001, ANN202 - torch's signature
            module = forkrun.module_of(args)
            stdio = (0, *(out.fileno() if out else fd for out, fd in ((self._stdout, 1),
                                                                     (self._stderr, 2))))
            forked = forkrun.fork(module, env, os.getcwd(), stdio) if module else None
            return forked or super()._popen(forkrun.plain_command(module) if module else args,
                                            forkrun.plain_environment(env))

    handlers.SubprocessHandler = ForkingHandler


def _attempt_store(host: str) -> int:
    """A fresh store (on a free port) for the next attempt's workers; its port."""
    store = BoundTCPStore(host, 0, None, True, _DEFAULT_TIMEOUT, wait_for_workers=False,
                          multi_tenant=True)  # fmt: skip
    return store.port


def _wait_for_other_agents(others: int) -> None:
    """Keep the store up until `others` agents said they left (or `LEAVE_WAIT_S` passed)."""
    deadline = time.monotonic() + LEAVE_WAIT_S
    while _servers[0].add(LEFT_KEY, 0) < others and time.monotonic() < deadline:
        time.sleep(0.05)


def _say_left(host: str, port: int) -> None:
    with contextlib.suppress(Exception):  # the store is gone: nobody waits for us
        dist.TCPStore(host, port, is_master=False, timeout=_CLIENT_TIMEOUT).add(LEFT_KEY, 1)


def _take_log_level() -> None:
    """torchrun's modules set their loggers' level from `LOGLEVEL` when imported: in the job's
    template (which preloads them) that was before this host's environment was known. Set it
    again, as their import here would have (default WARNING)."""
    level = os.environ.get("LOGLEVEL", "WARNING")
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith(_TORCHRUN_LOGGERS) and isinstance(logger, logging.Logger) and \
                logger.level != logging.NOTSET:
            logger.setLevel(level)


def main(argv: list[str]) -> int:
    """Run torchrun with `argv`; the exit code (1 when a worker failed, as torchrun)."""
    proctitle.set_title("agent", os.environ.get("SM_CURRENT_HOST"))
    dist.TCPStore = BoundTCPStore  # before torchrun's modules use the name
    _take_log_level()
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher import api

    api.LocalElasticAgent = _restarting_agent_class()
    _fork_workers()
    args = run.parse_args(argv)
    try:
        run.run(args)
    except ChildFailedError as error:  # its failures were recorded as torchrun saw them
        log.error("%s", error)
        return 1
    except SignalException as stop:  # the host was stopped (another failed): already logged,
        return 128 + int(stop.sigval)  # a traceback here would read like a second crash
    # Done and through the exit barrier: order the agents' exits around the store's holder.
    if args.node_rank == 0 and _servers:
        _wait_for_other_agents(int(str(args.nnodes).split(":")[-1]) - 1)
    elif args.node_rank != 0:
        _say_left(args.master_addr, args.master_port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
