"""The canary for what the runtime borrows from torch's and CPython's internals
(`ddpjob_runtime.job.torch_hooks`, `ddpjob_runtime.localkit.cpython_hooks`), and the plain behaviour
that runs where a borrowed member moved."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ddpjob_runtime.job import launcher, torch_hooks
from ddpjob_runtime.localkit import cpython_hooks
from ddpjob_runtime.shared import borrowed

from tests.conftest import free_port


def _report(version: str, problems: list[borrowed.Problem]) -> str:
    return f"{version} no longer has what ddpjob borrows:\n" + "\n".join(map(str, problems))


def test_torchs_agent_still_has_every_member_the_agent_hooks() -> None:
    problems = borrowed.problems(torch_hooks.HOOKS)
    assert not problems, _report(torch_hooks.VERSION, problems)


def test_cpython_still_has_every_member_the_template_hooks() -> None:
    problems = borrowed.problems(cpython_hooks.HOOKS)
    assert not problems, _report(cpython_hooks.VERSION, problems)


def test_a_changed_signature_turns_off_its_hook_alone_with_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    monkeypatch.setattr(LocalElasticAgent, "_rendezvous", lambda self, worker_group, why: None)
    with caplog.at_level(logging.WARNING, logger="ddpjob_runtime.shared.borrowed"):
        usable = borrowed.usable(torch_hooks.HOOKS, torch_hooks.VERSION)
    assert usable == {h.name for h in torch_hooks.HOOKS} - {torch_hooks.RESTARTS.name}
    [line] = caplog.messages
    assert line.startswith(f"{torch_hooks.VERSION}: ") and "LocalElasticAgent._rendezvous" in line
    assert "takes (worker_group, why), not (worker_group)" in line


def test_a_missing_member_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler

    monkeypatch.delattr(subprocess_handler.SubprocessHandler, "_popen")
    [problem] = borrowed.problems(torch_hooks.HOOKS)
    assert problem.hook == torch_hooks.FORK.name and problem.member.endswith("._popen")
    assert problem.reason.startswith("is missing")


class _Holder:
    def __init__(self) -> None:
        self.kept: int = 1


def _reads_nothing() -> int:
    return 1


def test_each_kind_of_member_check_can_fail() -> None:
    here = __name__
    assert borrowed.instance_attribute(f"{here}:_Holder", "kept").problem() is None
    assert borrowed.instance_attribute(f"{here}:_Holder", "gone").problem() == \
        "is not set by its constructor"
    assert borrowed.looked_up(f"{here}:_reads_nothing", "_Holder").problem().startswith(
        "no longer looks up the global _Holder")
    assert borrowed.called(f"{here}:_Holder.__init__", "x").problem() == "takes (), not (x)"
    assert borrowed.exists(f"{here}:_Holder.nothing").problem().startswith("is missing")
    assert borrowed.exists("no_such_module:x").problem().startswith("is missing")


def test_a_pybind_signature_is_read_from_its_docstring() -> None:
    import torch.distributed as dist

    names = [name for name, _ in borrowed.parameters(dist.TCPStore.__init__)]
    assert names[:4] == ["host_name", "port", "world_size", "is_master"]


_EXIT = """
import atexit, sys
from ddpjob_runtime.localkit import cpython_hooks
if sys.argv[1] == "moved":
    del atexit._run_exitfuncs
cpython_hooks.check()
atexit.register(print, "handler ran")
cpython_hooks.exit_now(3)
"""


@pytest.mark.parametrize("state", ["there", "moved"])
def test_a_forked_child_exits_with_its_code_and_handlers_either_way(state: str) -> None:
    done = subprocess.run([sys.executable, "-c", _EXIT, state], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (3, "handler ran\n")
    moved = [line for line in done.stderr.splitlines() if line.startswith("Python ")]
    assert len(moved) == (state == "moved"), done.stderr
    if moved:
        assert "atexit:_run_exitfuncs is missing" in moved[0]


# torch as a newer release might be: every hooked member moved, so torchrun runs plain.
_MOVED = """
import datetime, sys
import torch.distributed as dist
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.subprocess_handler import handlers

class OlderStore(dist.TCPStore):  # no master_listen_fd
    def __init__(self, host_name, port, world_size=None, is_master=False,
                 timeout=datetime.timedelta(seconds=300), wait_for_workers=True,
                 multi_tenant=False):
        super().__init__(host_name, port, world_size, is_master, timeout, wait_for_workers,
                         multi_tenant)

dist.TCPStore = OlderStore
monitor, restart = LocalElasticAgent._monitor_workers, LocalElasticAgent._restart_workers
LocalElasticAgent._monitor_workers = lambda self, worker_group, when=None: monitor(
    self, worker_group)
LocalElasticAgent._restart_workers = lambda self, worker_group, why=None: restart(
    self, worker_group)
start = handlers.get_subprocess_handler
handlers.get_subprocess_handler = lambda *args, **kwargs: start(*args, **kwargs)

from ddpjob_runtime.job import agent
sys.exit(agent.main(sys.argv[1:]))
"""
_TRAIN = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
with open(f"rank{dist.get_rank()}.txt", "w") as out:
    out.write(str(total.item()))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_where_every_hooked_member_moved_the_job_runs_as_plain_torchrun(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(_TRAIN))
    command = launcher.torchrun_command(nnodes=1, node_rank=0, nproc=2, master_addr="127.0.0.1",
                                       master_port=free_port(), entry="train.py", args=[],
                                       max_restarts=0)  # fmt: skip
    torchrun_args = command[command.index("--nnodes=1"):]
    done = subprocess.run([sys.executable, "-c", _MOVED, *torchrun_args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == ["3.0", "3.0"]
    lines = [line for line in done.stderr.splitlines()
             if line.startswith(f"{torch_hooks.VERSION}: ")]
    assert len(lines) == len(torch_hooks.HOOKS), done.stderr
    for hook, member in ((torch_hooks.STORE, "TCPStore.__init__"),
                         (torch_hooks.FAILURES, "LocalElasticAgent._monitor_workers"),
                         (torch_hooks.RESTARTS, "LocalElasticAgent._restart_workers"),
                         (torch_hooks.FORK, "get_subprocess_handler -> SubprocessHandler")):
        assert any(member in line and f"(used by: {hook.name})" in line for line in lines), lines


@pytest.mark.parametrize("libuv_takes_fd", [True, False])
def test_a_bound_store_serves_with_the_server_that_takes_its_socket(
    monkeypatch: pytest.MonkeyPatch, libuv_takes_fd: bool
) -> None:
    """torch < 2.8's libuv server refuses a listening socket (a SageMaker image's torch may be
    one): the store's own socket then goes to the classic server, which takes it."""
    monkeypatch.setattr(torch_hooks, "_LIBUV_TAKES_LISTEN_FD", libuv_takes_fd)
    store = torch_hooks.BoundTCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    try:
        assert store.libuvBackend is libuv_takes_fd
        store.set("key", "value")
        assert store.get("key") == b"value"
    finally:
        torch_hooks._servers.remove(store)
