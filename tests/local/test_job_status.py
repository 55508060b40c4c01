"""The job state machine (pure) and the log tail, without starting any job."""

from __future__ import annotations

from pathlib import Path

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
from ddpjob.local import failure_cause, jobstate, logtail

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
    state = jobstate.new_state("j", now=100.0)
    jobstate.move(state, S.TRAINING, now=101.0)
    jobstate.move(state, S.COMPLETED, now=105.0)
    assert [t["Status"] for t in state["transitions"]] == ["Starting", "Training", "Completed"]
    assert state["transitions"][0]["EndTime"] == 101.0
    assert (state["training_start_time"], state["training_end_time"]) == (101.0, 105.0)
    with pytest.raises(InvalidTransition):
        jobstate.move(state, S.STOPPING)


def test_log_tail_yields_whole_lines_per_host_and_the_rest_at_the_end(tmp_path: Path) -> None:
    a, b = tmp_path / "algo-1.log", tmp_path / "algo-2.log"
    a.write_bytes(b"one\ntw")
    done = iter([False, True])
    tail = logtail.follow({"algo-1": a, "algo-2": b}, lambda: next(done), poll_s=0.01)
    assert next(tail) == ("algo-1", "one")
    with open(a, "ab") as f:
        f.write(b"o\nthree")  # "three" is never terminated
    b.write_bytes(b"late\r\n")  # a file that appears after the tail began
    rest = list(tail)  # ends: the second is_done() says True, then the rest is drained
    assert [line for host, line in rest if host == "algo-1"] == ["two", "three"]
    assert [line for host, line in rest if host == "algo-2"] == ["late"]
    snapshot = list(logtail.follow({"algo-1": a}, lambda: False, follow=False))
    assert snapshot == [("algo-1", "one"), ("algo-1", "two"), ("algo-1", "three")]


def test_the_cause_is_the_users_exception_not_the_fallout_on_other_hosts() -> None:
    user = failure_cause.HostFailure(
        "algo-2", "host algo-2, rank 1, exit code 1: ValueError: boom\n\nTraceback...", 12.0
    )
    fallout = failure_cause.HostFailure(
        "algo-1", "host algo-1, rank 0, exit code 1: RuntimeError: [../gloo/transport/tcp/"
        "pair.cc:534] Connection closed by peer [127.0.0.1]:4711", 11.0, seen_first=True,
    )  # fmt: skip
    stopped = failure_cause.HostFailure(
        "algo-3", "host algo-3, exit code 143: stopped by SIGTERM", 10.0
    )
    assert failure_cause.choose([fallout, stopped, user]) is user
    assert failure_cause.choose([stopped, fallout]) is stopped  # both fallout: the earliest
    two_users = [user, failure_cause.HostFailure("algo-1", user.text.replace("2", "1"), 11.5)]
    assert failure_cause.choose(two_users).host == "algo-1"  # then the earliest written
    assert failure_cause.choose([]) is None
