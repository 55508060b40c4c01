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
from ddpjob.local.base.jobstate import JobState

S = SecondaryStatus


def test_every_secondary_status_belongs_to_one_primary_and_ends_stay_ended() -> None:
    # every primary but Deleting, which only SageMaker's DeleteTrainingJob reaches
    assert {s.primary for s in S} == set(TrainingJobStatus) - {TrainingJobStatus.DELETING}
    terminal = {s for s in S if s.is_terminal}
    assert terminal == {S.COMPLETED, S.FAILED, S.STOPPED, S.MAX_RUNTIME_EXCEEDED,
                        S.MAX_WAIT_TIME_EXCEEDED}
    assert S.MAX_RUNTIME_EXCEEDED.primary is TrainingJobStatus.STOPPED  # as SageMaker documents
    assert S.MAX_WAIT_TIME_EXCEEDED.primary is TrainingJobStatus.STOPPED
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


def test_a_retried_job_shows_restarting_then_starts_again() -> None:
    state = JobState.new("j", now=1.0)
    state.progress(S.TRAINING, now=2.0)
    assert S.RESTARTING.primary is TrainingJobStatus.IN_PROGRESS  # as SageMaker documents
    assert state.retry("Restarting the training job (retry 1 of 1) after: x", now=3.0)
    assert state.status is S.RESTARTING and not state.is_terminal
    assert state.progress(S.TRAINING) is False  # nothing moves it on but a new start
    assert state.start_again(now=4.0) and not state.start_again()
    state.progress(S.TRAINING, now=5.0)
    assert state.end(S.COMPLETED, None, now=6.0)
    assert [(t["Status"], t["StatusMessage"]) for t in state.transitions][1:4] == [
        ("Training", "Training in progress"),
        ("Restarting", "Restarting the training job (retry 1 of 1) after: x"),
        ("Starting", "Preparing the instances for training"),
    ]
    assert state.training_start_time == 2.0  # MaxRuntimeInSeconds counts the whole job


def test_a_stop_wins_over_a_retry() -> None:
    stopping = JobState.new("j", now=1.0)
    stopping.request_stop()
    assert not stopping.retry("x")
    restarting = JobState.new("j", now=1.0)
    restarting.retry("x")
    assert restarting.request_stop() and not restarting.start_again()
    assert restarting.end(S.COMPLETED, None) and restarting.status is S.STOPPED
    with pytest.raises(InvalidTransition):
        check_move(S.RESTARTING, S.TRAINING)  # a retry always starts from the beginning
