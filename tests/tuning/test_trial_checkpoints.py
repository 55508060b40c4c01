"""A tuning trial's own checkpoints among those its trials share (`tuning.trial_checkpoints`):
its own folder first, else what the shared folder got while it ran alone."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from ddpjob.errors import UserInputError
from ddpjob.tuning.trial_checkpoints import TrialCheckpoints

from tests.tuning.conftest import T0
from tests.tuning.conftest import save_checkpoint as save


def summary(name: str, start: float | None, end: float | None) -> dict:
    times = {"TrainingStartTime": None if start is None else T0 + dt.timedelta(seconds=start),
             "TrainingEndTime": None if end is None else T0 + dt.timedelta(seconds=end)}
    return {"TrainingJobName": name, **{k: v for k, v in times.items() if v is not None}}


def test_the_trials_that_ran_alongside_are_those_whose_runs_overlap() -> None:
    trials = [summary("t-001", 0, 10), summary("t-002", 5, 20), summary("t-003", 20, None),
              summary("t-004", 30, 40), summary("t-005", None, None)]
    assert TrialCheckpoints.of("file:///c", "t-002", trials).alongside == ("t-001", "t-003")
    assert TrialCheckpoints.of("file:///c", "t-004", trials).alongside == ("t-003",)
    assert TrialCheckpoints.of("file:///c", "t-001", trials[:1]).alongside == ()
    with pytest.raises(UserInputError, match="t-009 is not a trial"):
        TrialCheckpoints.of("file:///c", "t-009", trials)


def test_its_own_folder_wins_over_the_shared_one(tmp_path: Path) -> None:
    save(tmp_path / "t-002", 3, 12, b"own")
    save(tmp_path, 4, 12, b"shared")
    trials = [summary("t-001", 0, 15), summary("t-002", 5, 20)]
    found = TrialCheckpoints.of(tmp_path.as_uri(), "t-002", trials).checkpoints()
    assert [c.step for c in found] == [3]
    assert found[0].uri.endswith("/t-002/step-000000003/")


def test_the_shared_folder_gives_what_was_written_while_the_trial_ran(tmp_path: Path) -> None:
    save(tmp_path, 1, 8, b"before: the first trial's")
    save(tmp_path, 2, 12, b"the second's")
    save(tmp_path, 3, 19, b"the second's, last")
    save(tmp_path, 4, 25, b"after: the third's")
    trials = [summary("t-001", 0, 10), summary("t-002", 11, 20), summary("t-003", 21, 30)]
    found = TrialCheckpoints.of(tmp_path.as_uri(), "t-002", trials).checkpoints()
    assert [c.step for c in found] == [2, 3]


def test_a_shared_folder_written_by_trials_at_once_is_refused(tmp_path: Path) -> None:
    save(tmp_path, 1, 12, b"whose?")
    trials = [summary("t-001", 0, 15), summary("t-002", 11, 20)]
    with pytest.raises(UserInputError, match=r"cannot be told apart: trials t-001 ran while "
                                             r"t-002 did"):
        TrialCheckpoints.of(tmp_path.as_uri(), "t-002", trials).checkpoints()


def test_none_written_while_it_ran_is_one_error(tmp_path: Path) -> None:
    save(tmp_path, 1, 8, b"the first trial's")
    trials = [summary("t-001", 0, 10), summary("t-002", 11, 20)]
    with pytest.raises(UserInputError, match=r"no complete checkpoint of trial t-002: none "
                                             r"under .*/t-002/, and none under"):
        TrialCheckpoints.of(tmp_path.as_uri(), "t-002", trials).checkpoints()
