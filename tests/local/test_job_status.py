"""The job state machine (pure) and a local job's typed state, without starting any job."""

from __future__ import annotations

import pytest
from ddpjob.job_status import (
    ALLOWED_MOVES,
    EndCause,
    InvalidTransition,
    SecondaryStatus,
    TrainingJobStatus,
    advance,
    check_move,
    ending,
    job_progress,
)
from ddpjob.local.jobstate import JobState

S = SecondaryStatus


def test_every_secondary_status_belongs_to_one_primary_and_ends_stay_ended() -> None:
    assert {s.primary for s in S} == set(TrainingJobStatus)
    terminal = {s for s in S if s.is_terminal}
    assert terminal == {S.COMPLETED, S.FAILED, S.STOPPED, S.MAX_RUNTIME_EXCEEDED}
    assert S.MAX_RUNTIME_EXCEEDED.primary is TrainingJobStatus.STOPPED  # as SageMaker documents
    for status in terminal:
        assert ALLOWED_MOVES[status] == frozenset()
    for status in set(S) - terminal:  # everything running can still fail
        assert S.FAILED in ALLOWED_MOVES[status]
    with pytest.raises(InvalidTransition, match="from Training to Downloading"):
        check_move(S.TRAINING, S.DOWNLOADING)
    with pytest.raises(InvalidTransition):
        check_move(S.STOPPING, S.COMPLETED)  # a stopped job never reports Completed


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        ([], S.STARTING),
        (["Starting", "Training"], S.STARTING),
        (["Training", "Downloading"], S.DOWNLOADING),
        (["Training", "Training"], S.TRAINING),
        (["Uploading", "Done"], S.UPLOADING),  # the first host uploads, the others are done
        (["Done", "Done"], S.UPLOADING),  # never reported past Uploading while running
    ],
)
def test_the_job_is_as_far_as_its_slowest_host(phases: list[str], expected: S) -> None:
    assert job_progress(phases) is expected


def test_progress_only_moves_forward_and_never_out_of_an_ending() -> None:
    assert advance(S.TRAINING, S.DOWNLOADING) is S.TRAINING
    assert advance(S.STARTING, S.TRAINING) is S.TRAINING
    assert advance(S.STOPPING, S.UPLOADING) is S.STOPPING
    assert advance(S.FAILED, S.TRAINING) is S.FAILED


def test_the_first_cause_decides_how_a_job_ends() -> None:
    assert ending([0, 0], None) is S.COMPLETED
    assert ending([0, 1], None) is S.FAILED
    assert ending([143, 143], EndCause.STOP_REQUESTED) is S.STOPPED
    assert ending([0, 0], EndCause.STOP_REQUESTED) is S.STOPPED
    assert ending([143], EndCause.MAX_RUNTIME) is S.MAX_RUNTIME_EXCEEDED
    assert ending([1, 143], EndCause.HOST_FAILED) is S.FAILED


def test_moves_keep_sagemakers_transition_history() -> None:
    state = JobState.new("j", now=100.0)
    assert state.progress(S.TRAINING, now=101.0)
    assert state.end(S.COMPLETED, None, now=105.0)
    assert [t["Status"] for t in state.transitions] == ["Starting", "Training", "Completed"]
    assert state.transitions[0]["EndTime"] == 101.0
    assert (state.training_start_time, state.training_end_time) == (101.0, 105.0)
    assert not state.end(S.FAILED, "late")  # the first end stays
    assert not state.request_stop()
    with pytest.raises(InvalidTransition):
        state._set_state(S.STOPPING, None, None)
    assert JobState.from_json(state.to_json()) == state  # what state.json holds


def test_a_stop_wins_over_anything_but_a_failure() -> None:
    stopped = JobState.new("j", now=1.0)
    assert stopped.request_stop(now=2.0) and not stopped.request_stop()
    assert stopped.end(S.COMPLETED, None, now=3.0)
    assert (stopped.status, stopped.failure_reason) == (S.STOPPED, None)
    failed = JobState.new("j", now=1.0)
    failed.request_stop()
    failed.end(S.FAILED, "AlgorithmError: boom\nTraceback")
    assert failed.status is S.FAILED and failed.failure_reason.startswith("AlgorithmError")
    assert failed.transitions[-1]["StatusMessage"] == "AlgorithmError: boom"


def test_a_lost_supervisor_is_seen_as_an_end_without_changing_the_state() -> None:
    running = JobState.new("j", now=1.0)
    running.supervisor_pid = 4242
    seen = running.with_lost_supervisor("/home/jobs/j/supervisor.log")
    assert seen.status is S.FAILED and "4242" in seen.failure_reason
    assert running.status is S.STARTING  # the reader's copy only
    running.request_stop()
    assert running.with_lost_supervisor("log").status is S.STOPPED
