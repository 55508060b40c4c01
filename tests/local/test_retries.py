"""Job retries (RetryStrategy.MaximumRetryAttempts) in real 2-host x 1-worker local jobs.

The test SIGKILLs algo-2's `ddpjob-train` (the platform failing, not the user's script) once
the first attempt checkpointed; a retry starts every host again from the latest checkpoint.
Real torchrun and gloo groups (rank 0's checkpoints); every job fixes `PYTHONHASHSEED`, so its
workers are forked from the job's template (a hash seed per rank is not the subject).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    JOB_TIMEOUT_S,
    JOBS,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

pytestmark = pytest.mark.slow

_KILLED = "host algo-2: ddpjob-train was killed by SIGKILL"


def _kill_algo_2_when_ready(session: LocalSession, name: str, first_step: int) -> None:
    """Once rank 0 (algo-1) says the attempt starting at `first_step` waits, SIGKILL the
    `ddpjob-train` of algo-2 (its pid from the job's state)."""
    ready = session.job_dir(name) / "hosts" / "algo-1" / "output" / "data" / f"ready-{first_step}"
    wait_for(ready.exists, JOB_TIMEOUT_S, f"{ready.name} from the job's rank 0")
    os.kill(JobStore(session.home).state(name).hosts["algo-2"].pid, signal.SIGKILL)


def _job(session: LocalSession, tmp_path: Path, name: str, retries: int | None,
         kills: int, **hps: str) -> dict[str, Any]:
    source = source_tar(tmp_path / "src", JOBS / "retryable.py")
    retry = {"RetryStrategy": {"MaximumRetryAttempts": retries}} if retries else {}
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, "retryable.py", hosts=2, workers=1, hyperparameters=hps,
        hash_seed="0", CheckpointConfig={"S3Uri": (tmp_path / "checkpoints").as_uri()}, **retry,
    ))  # fmt: skip
    for first_step in (0, 2)[:kills]:  # attempt 1 waits after steps 0-1, attempt 2 after 2-3
        _kill_algo_2_when_ready(session, name, first_step)
    job = wait_until_ended(session, name)
    assert_no_processes(session.home, timeout_s=10)
    return job


def _history(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["Status"], t["StatusMessage"]) for t in job["SecondaryStatusTransitions"]]


def test_a_killed_host_is_retried_from_the_latest_checkpoint(
    session: LocalSession, tmp_path: Path
) -> None:
    job = _job(session, tmp_path, "retry-once", retries=1, kills=1)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    history = _history(job)
    restarting = [i for i, (status, _) in enumerate(history) if status == "Restarting"]
    assert len(restarting) == 1, history
    message = history[restarting[0]][1]
    assert message == f"Restarting the training job (retry 1 of 1) after an internal error: " \
                      f"{_KILLED}", message
    assert history[restarting[0] + 1][0] == "Starting", history
    assert [s for s, _ in history[restarting[0] + 1:]][-1] == "Completed", history
    text = log_text(session, "retry-once", "algo-1") + log_text(session, "retry-once", "algo-2")
    for rank in range(2):
        assert f"rank {rank} loaded None first 0" in text  # the first attempt
        assert f"rank {rank} loaded 1 first 2" in text, text[-3000:]  # resumed at step 1's
        assert f"rank {rank} done" in text


def test_without_a_retry_strategy_a_killed_host_fails_the_job(
    session: LocalSession, tmp_path: Path
) -> None:
    job = _job(session, tmp_path, "retry-none", retries=None, kills=1)
    assert job["TrainingJobStatus"] == "Failed"
    reason = job["FailureReason"]
    assert reason.startswith(f"AlgorithmError: {_KILLED}\n"), reason
    assert "retries (earlier)" not in reason and "after 1 retry" not in reason, reason
    assert "Restarting" not in [s for s, _ in _history(job)]


def test_spent_retries_fail_the_job_with_the_cause_and_the_count(
    session: LocalSession, tmp_path: Path
) -> None:
    job = _job(session, tmp_path, "retry-spent", retries=1, kills=2, always="true")
    assert job["TrainingJobStatus"] == "Failed"
    reason = job["FailureReason"]
    assert reason.startswith(f"AlgorithmError: {_KILLED}, after 1 retry\n"), reason
    assert f"retries (earlier):\n- retry 1 after: {_KILLED}\n" in reason, reason
    assert [s for s, _ in _history(job)].count("Restarting") == 1


def test_a_user_error_is_never_retried(session: LocalSession, tmp_path: Path) -> None:
    source = source_tar(tmp_path / "src", JOBS / "fail_rank.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "retry-user", source, "fail_rank.py", hosts=2, workers=1, hash_seed="0",
        hyperparameters={"fail-rank": "1"}, RetryStrategy={"MaximumRetryAttempts": 3},
    ))  # fmt: skip
    job = wait_until_ended(session, "retry-user")
    assert job["TrainingJobStatus"] == "Failed"
    reason = job["FailureReason"]
    assert reason.startswith("AlgorithmError: host algo-2, rank 1"), reason
    assert "ValueError: boom on rank 1" in reason, reason
    assert "retries (earlier)" not in reason and "retry" not in reason.split("\n")[0], reason
    assert "Restarting" not in [s for s, _ in _history(job)]
    assert_no_processes(session.home)
