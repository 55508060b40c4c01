"""The agents' coordination between a failed attempt and the next (`restarts.prepare`), through
a real `torch.distributed.TCPStore` in this process, one host's agent after the other (each
host's environment in turn): no torchrun, no worker (real restarts: test_failures.py, jobs).
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddpjob_runtime import checkpoints
from ddpjob_runtime.job import restarts
from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.shared import contract, failure, phases

KILLED = failure.RankFailure(3, 137, "the worker was killed by SIGKILL", time=2.0, attempt=0)
CONSEQUENCE = failure.RankFailure(0, 1, "RuntimeError: Connection closed by peer", time=1.0,
                                  attempt=0)
NEXT_PORT = 41234  # what the first host's agent would get from a fresh store


@pytest.fixture
def store() -> Iterator[object]:
    """The rendezvous store the agents share (torch is imported by this tier's tests anyway)."""
    from torch.distributed import TCPStore

    yield TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30),
                   wait_for_workers=False)


def as_host(monkeypatch: pytest.MonkeyPatch, root: Path, host: str, uri: str | None) -> Path:
    """This process's environment as host `host`'s agent has it; its folder."""
    monkeypatch.setenv(restarts.HOST_ENV, host)
    monkeypatch.setenv(failure.RECORD_DIR_ENV, str(root / host / "failures"))
    monkeypatch.setenv(contract.ENV_CHECKPOINT_DIR, str(root / host / "checkpoints"))
    monkeypatch.setenv(phases.STATUS_FILE_ENV, str(root / host / "status.json"))
    if uri is None:
        monkeypatch.delenv(contract.ENV_CHECKPOINT_URI, raising=False)
    else:
        monkeypatch.setenv(contract.ENV_CHECKPOINT_URI, uri)
    return root / host


def prepare(store: object, node_rank: int, nnodes: int = 2) -> restarts.NextAttempt:
    return restarts.prepare(store, attempt=1, max_restarts=2, node_rank=node_rank,
                            nnodes=nnodes, new_store_port=lambda: NEXT_PORT)


def report_before_the_decision(store: object, monkeypatch: pytest.MonkeyPatch,
                               node_rank: int) -> None:
    """Host `node_rank`'s agent (this environment) publishes its failure and waits for the
    first host's decision, which is not there yet: it fails (rather than wait forever), having
    recorded no restart."""
    monkeypatch.setattr(restarts, "DECISION_WAIT_S", 0.1)
    with pytest.raises(RuntimeError):
        prepare(store, node_rank=node_rank)
    assert failure.restarts(Path(os.environ[failure.RECORD_DIR_ENV])) == []


def status(folder: Path) -> dict:
    return json.loads((folder / "status.json").read_text())


def test_every_host_restarts_from_the_first_hosts_checkpoint_naming_the_first_real_failure(
    store: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    uri = (tmp_path / "remote").as_uri()
    first = as_host(monkeypatch, tmp_path, "algo-1", None)
    checkpoints.save({"step": 4}, step=4)
    checkpoints.flush()  # written on the first host, never uploaded (rank 0 was stopped)
    failure.record(CONSEQUENCE, first / "failures")
    second = as_host(monkeypatch, tmp_path, "algo-2", uri)
    failure.record(KILLED, second / "failures")
    report_before_the_decision(store, monkeypatch, node_rank=1)

    as_host(monkeypatch, tmp_path, "algo-1", uri)
    decided = prepare(store, node_rank=0)
    cause = KILLED.headline("algo-2")  # earlier than algo-1's, but a consequence of it
    assert decided == restarts.NextAttempt(1, cause, 4, NEXT_PORT)
    assert checkpoint_restore.restore_latest(uri, tmp_path / "elsewhere") == 4  # uploaded first
    line = f"restart 1 of 2 after: {cause}"
    assert failure.restarts(first / "failures") == [line]
    assert (status(first)["phase"], status(first)["message"]) == ("Training", line)

    as_host(monkeypatch, tmp_path, "algo-2", uri)
    assert prepare(store, node_rank=1) == decided
    assert checkpoints.complete_steps(second / "checkpoints") == [4]  # brought down
    assert failure.restarts(second / "failures") == [line]
    assert status(second)["message"] == line


def test_a_host_that_never_reports_does_not_hold_up_the_restart(
    store: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(restarts, "REPORT_WAIT_S", 0.1)
    first = as_host(monkeypatch, tmp_path, "algo-1", None)
    failure.record(KILLED, first / "failures")
    decided = prepare(store, node_rank=0, nnodes=3)  # algo-2 and algo-3 never report
    assert decided == restarts.NextAttempt(1, KILLED.headline("algo-1"), None, NEXT_PORT)
    assert failure.restarts(first / "failures") == [f"restart 1 of 2 after: {decided.cause}"]


def test_without_a_checkpoint_uri_each_host_resumes_from_its_own_folder(
    store: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = as_host(monkeypatch, tmp_path, "algo-1", None)
    checkpoints.save({"step": 2}, step=2)
    checkpoints.flush()
    failure.record(KILLED, first / "failures")
    second = as_host(monkeypatch, tmp_path, "algo-2", None)  # no failure of its own
    report_before_the_decision(store, monkeypatch, node_rank=1)
    as_host(monkeypatch, tmp_path, "algo-1", None)
    decided = prepare(store, node_rank=0)
    assert (decided.cause, decided.step) == (KILLED.headline("algo-1"), 2)
    as_host(monkeypatch, tmp_path, "algo-2", None)
    assert prepare(store, node_rank=1) == decided
    assert checkpoints.complete_steps(second / "checkpoints") == []  # nothing brought down
    assert "resumes from its own checkpoint folder" in caplog.text
