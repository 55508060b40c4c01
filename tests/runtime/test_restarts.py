"""Worker restarts' pure parts: the budget's check, per-attempt records, the cause's choice."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from ddpjob_runtime.job import launcher, restarts
from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.shared import failure
from ddpjob_runtime.shared.errors import RuntimeContractError


@pytest.mark.parametrize("value", [-1, 101, "2", True, 1.0])
def test_a_bad_restart_budget_is_a_contract_error(value: object) -> None:
    with pytest.raises(RuntimeContractError, match="'ddpjob_max_restarts' must be an integer"):
        launcher.max_restarts({"ddpjob_max_restarts": value})


def test_the_budget_reaches_torchrun() -> None:
    assert launcher.max_restarts({}) == 0
    command = launcher.torchrun_command(nnodes=2, node_rank=0, nproc=1, master_addr="127.0.0.1",
                                        master_port=1, entry="t.py", args=[], max_restarts=3)
    assert "--max_restarts=3" in command


def test_each_attempt_keeps_its_own_failures(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    failure.record(failure.RankFailure(3, 137, "the worker was killed by SIGKILL", time=1.0),
                   tmp_path)  # attempt 0 (no TORCHELASTIC_RESTART_COUNT)
    monkeypatch.setenv(failure.RESTART_COUNT_ENV, "1")
    failure.record(failure.RankFailure(3, 2, "ValueError: later", time=9.0), tmp_path)
    assert failure.first_failure(tmp_path, 0).exception == "the worker was killed by SIGKILL"
    assert failure.first_failure(tmp_path).exception == "ValueError: later"  # the last attempt
    assert failure.first_failure(tmp_path, 2) is None


def test_the_cause_of_a_restart_is_the_earliest_failure_that_is_no_consequence(
    tmp_path: Path,
) -> None:
    failure.record(failure.RankFailure(0, 1, "RuntimeError: Connection closed by peer",
                                       time=1.0, attempt=0), tmp_path)  # fmt: skip
    algo1 = restarts.local_report(tmp_path, "algo-1", 0)
    algo2 = {"text": "host algo-2, rank 3, exit code 137: the worker was killed by SIGKILL",
             "consequence": False, "time": 2.0}  # fmt: skip
    quiet = restarts.local_report(tmp_path / "none", "algo-3", 0)
    assert algo1["consequence"] and quiet["time"] == math.inf
    assert restarts.choose_cause([algo1, algo2, quiet]) == algo2["text"]


def test_restart_lines_are_kept_in_order(tmp_path: Path) -> None:
    failure.record_restart(tmp_path, "restart 1 of 2 after: a")
    failure.record_restart(tmp_path, "restart 2 of 2 after: b")
    assert failure.restarts(tmp_path) == ["restart 1 of 2 after: a", "restart 2 of 2 after: b"]
    assert failure.restarts(tmp_path / "none") == []


def test_an_interrupted_upload_is_finished_before_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ddpjob_runtime import checkpoints

    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(tmp_path / "local"))
    monkeypatch.delenv("DDPJOB_CHECKPOINT_URI", raising=False)
    checkpoints.save({"step": 4}, step=4)
    checkpoints.flush()  # written locally, never uploaded (as if rank 0 was stopped)
    uri = (tmp_path / "remote").as_uri()
    folder = tmp_path / "local" / checkpoints.step_dir_name(4)
    checkpoints.upload_if_missing(folder, uri)
    checkpoints.upload_if_missing(folder, uri)  # already there: nothing to do
    assert checkpoint_restore.restore_latest(uri, tmp_path / "other-host") == 4
