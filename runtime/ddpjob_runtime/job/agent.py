"""torchrun as the bootstrap runs it: `python -m ddpjob_runtime.job.agent <torchrun arguments>`.

It is torchrun (`torch.distributed.run`) with four additions, each installed through
`ddpjob_runtime.job.torch_hooks` only where this torch still has the private members it relies on
(else plain torchrun's behaviour, said in one logged line):

- Its TCPStore servers listen only on the address they are given (loopback for local jobs):
  torchrun would listen on every interface; a socket bound beforehand is handed to the store
  through TCPStore's own `master_listen_fd`.
- The agent that holds the rendezvous store (the first host's) leaves only after the other
  agents left, so that no agent loses the store in torchrun's exit barrier.
- The failures torchrun saw (exit code or signal, when) are recorded for the bootstrap, next to
  the ranks' own records, so a killed rank is named like one that raised.
- Worker restarts (`--max_restarts`) agree across hosts on the cause and the checkpoint to
  resume from, and give each attempt's workers a fresh store (`ddpjob_runtime.job.restarts`).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys
import time

import torch.distributed as dist

from ddpjob_runtime.job import restarts, torch_hooks
from ddpjob_runtime.shared import failure, forkrun, proctitle

log = logging.getLogger("ddpjob_runtime.job.agent")

LEFT_KEY = "ddpjob/agents_left"
# How long the store's agent waits for the others once it is done itself.
LEAVE_WAIT_S = 30.0
_CLIENT_TIMEOUT = datetime.timedelta(seconds=5)
_TORCHRUN_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher",
                     "torch.distributed.run")


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


def _between_attempts(attempt: torch_hooks.Attempt) -> int:
    """Agree with the other agents on the restart (`restarts.prepare`); the workers' port."""
    return restarts.prepare(
        attempt.store,
        attempt=attempt.number,
        max_restarts=attempt.max_restarts,
        node_rank=attempt.node_rank,
        nnodes=attempt.nnodes,
        new_store_port=lambda: torch_hooks.fresh_store(attempt.master_addr),
    ).port


def _start_worker(args: list[str], env: dict[str, str], stdio: tuple[int, int, int],
                  popen: torch_hooks.Popen) -> object:
    """Where a worker's command is a forkrun client's, ask the template for the worker
    directly instead (an interpreter less per worker, where the template forks it:
    `ddpjob_runtime.localkit.zygote`), else start `python -m` it with torchrun's own `popen`. The
    worker's pid is its process group, as torchrun's start makes it; it is killed when this
    agent dies."""
    module = forkrun.module_of(args)
    forked = forkrun.fork(module, env, os.getcwd(), stdio) if module else None
    return forked or popen(forkrun.plain_command(module) if module else args,
                           forkrun.plain_environment(env))


def _wait_for_other_agents(store: dist.TCPStore, others: int) -> None:
    """Keep `store` up until `others` agents said they left (or `LEAVE_WAIT_S` passed)."""
    deadline = time.monotonic() + LEAVE_WAIT_S
    while store.add(LEFT_KEY, 0) < others and time.monotonic() < deadline:
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
    torch_hooks.install(_record_child_failures, _between_attempts, _start_worker)
    _take_log_level()
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = run.parse_args(argv)
    try:
        run.run(args)
    except ChildFailedError as error:  # its failures were recorded as torchrun saw them
        log.error("%s", error)
        return 1
    except SignalException as stop:  # the host was stopped (another failed): already logged,
        return 128 + int(stop.sigval)  # a traceback here would read like a second crash
    # Done and through the exit barrier: order the agents' exits around the store's holder.
    if args.node_rank == 0 and (store := torch_hooks.rendezvous_store()) is not None:
        _wait_for_other_agents(store, int(str(args.nnodes).split(":")[-1]) - 1)
    elif args.node_rank != 0:
        _say_left(args.master_addr, args.master_port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
