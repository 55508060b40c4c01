"""End-to-end jobs through the public estimator API, S3 served by moto: shared machinery.

A job is started with `fit(wait=False)` and waited on with a deadline (never `fit()`'s own
unbounded wait). The training script is `jobs/linreg.py`, whose loss at step k is exactly
mean(w*^2) / 4**k (see its docstring), so where a job started from is read off its log.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ddpjob import LocalSession, PyTorch
from ddpjob_runtime.shared.contract import RANK_LINE_REGEX

from tests.conftest import GROUP_TEARDOWN
from tests.local.conftest import (
    assert_no_processes,
    local_session_at,
    wait_for,
)

JOBS = Path(__file__).parent / "jobs"
SCRIPT = "linreg.py"
DEFAULT_TARGET = (3.0, -1.0, 2.0, 5.0)  # linreg.py's --target default
JOB_TIMEOUT_S = 240  # deadline of every wait for a job; also its MaxRuntimeInSeconds
# The interruptible run: a checkpoint per step, SLEEP_S between steps. The test interrupts it
# once the latest complete checkpoint is at least INTERRUPT_AT (loss already below L0 / 4**5),
# while STEPS * SLEEP_S leaves the test seconds to do so before the job could end on its own.
STEPS, SLEEP_S, INTERRUPT_AT = 20, 0.5, 4
KEEP = 3  # checkpoints.save's default number of complete checkpoints kept

_STEP = re.compile(r"\bstep=(\d+) loss=(\S+)")
_RANK_PREFIX = re.compile(f"^{RANK_LINE_REGEX}")
_RESUMED = re.compile(r"\bresumed rank=(\d+) step=(\d+)")
_FRESH = re.compile(r"\bfresh start rank=(\d+)")


#: The environment of e2e's jobs: real torchrun, DDP and checkpoints from the ranks, with a
#: fixed `PYTHONHASHSEED`, so that the workers are forked from the job's template instead of
#: each importing torch (a hash seed per rank is not what these tests prove; docs/testing.md).
FORKED_WORKERS = {"PYTHONHASHSEED": "0"}


@pytest.fixture
def session(tmp_path: Path) -> Iterator[LocalSession]:
    """A LocalSession in a fresh home; after the test, no process of its jobs may be left."""
    with local_session_at(tmp_path / "home") as local:
        yield local


def estimator(session: LocalSession, bucket: str, **kwargs: Any) -> PyTorch:
    """A PyTorch estimator of jobs/linreg.py whose code and outputs go to s3://bucket/ (its
    workers forked: `FORKED_WORKERS`)."""
    settings: dict[str, Any] = {
        "source_dir": str(JOBS), "dependencies": [str(GROUP_TEARDOWN)],
        "instance_type": "local", "instance_count": 1,
        "distribution": {"torch_distributed": {"enabled": True}},
        "environment": FORKED_WORKERS,
        "output_path": f"s3://{bucket}/output", "code_location": f"s3://{bucket}/code",
        "max_run": JOB_TIMEOUT_S, "session": session,
    }  # fmt: skip
    settings.update(kwargs)
    return PyTorch(entry_point=SCRIPT, **settings)


def interruptible(session: LocalSession, bucket: str, **kwargs: Any) -> PyTorch:
    """The estimator of a slow run that checkpoints every step to s3://bucket/ckpt/run."""
    return estimator(session, bucket, hyperparameters={"steps": STEPS, "sleep": SLEEP_S},
                     checkpoint_s3_uri=f"s3://{bucket}/ckpt/run", **kwargs)


def wait_until_ended(session: LocalSession, name: str) -> dict[str, Any]:
    """DescribeTrainingJob once the job is Completed, Failed or Stopped (deadline-bound)."""

    def ended() -> dict[str, Any] | None:
        job = session.describe(name).raw
        return job if job["TrainingJobStatus"] in ("Completed", "Failed", "Stopped") else None

    return wait_for(ended, JOB_TIMEOUT_S, f"job {name} to end")


def log_lines(session: LocalSession, name: str, host: str = "algo-1") -> list[str]:
    """What host `host` of the job logged, read through the session's log API, each worker's
    line without the `[rank N] ` it is logged with (`contract.RANK_LINE_REGEX`)."""
    return [_RANK_PREFIX.sub("", line, count=1)
            for h, line in session.logs(name, follow=False) if h == host]


def hosts_of(job: dict[str, Any]) -> list[str]:
    """algo-1 ... algo-N; with one worker per host, rank r runs on algo-(r+1)."""
    return [f"algo-{i + 1}" for i in range(job["ResourceConfig"]["InstanceCount"])]


def starts(session: LocalSession, job: dict[str, Any]) -> dict[int, int | None]:
    """`{rank: step resumed from, or None for a fresh start}`, from every host's log."""
    found: dict[int, int | None] = {}
    for host in hosts_of(job):
        for line in log_lines(session, job["TrainingJobName"], host):
            if m := _RESUMED.search(line):
                found[int(m.group(1))] = int(m.group(2))
            elif m := _FRESH.search(line):
                found[int(m.group(1))] = None
    return found


def losses(lines: list[str]) -> dict[int, float]:
    """`{step: loss}` from linreg.py's `step=K loss=L` lines."""
    return {int(m.group(1)): float(m.group(2)) for line in lines if (m := _STEP.search(line))}


def expected_loss(step: int, target: tuple[float, ...] = DEFAULT_TARGET) -> float:
    """linreg.py's loss before update `step` when it started from w = 0."""
    return sum(v * v for v in target) / len(target) / 4**step


def assert_loss_curve(found: dict[int, float], target: tuple[float, ...] = DEFAULT_TARGET,
                      ) -> None:  # fmt: skip
    for step, loss in found.items():
        assert math.isclose(loss, expected_loss(step, target), rel_tol=1e-9), (step, loss)


@dataclass(frozen=True)
class Interrupted:
    """A job stopped mid-training: its name, the latest complete checkpoint, its losses."""

    name: str
    latest: int
    losses: dict[int, float]


def interrupt_when_checkpointed(session: LocalSession, est: PyTorch, name: str,
                                stop: Callable[[], None]) -> Interrupted:
    """Wait until job `name` has >= 2 complete checkpoints under the estimator's
    checkpoint_s3_uri, the latest at step >= INTERRUPT_AT; `stop()` it (a SIGTERM to every
    process, as a spot interruption or StopTrainingJob gives); check it ends Stopped with no
    process left. The latest complete checkpoint is read once it has ended."""

    def checkpointed() -> bool:
        job = session.describe(name).raw
        assert job["TrainingJobStatus"] == "InProgress", (
            f"job {name} ended ({job['TrainingJobStatus']}: {job.get('FailureReason')}) before "
            f"it could be interrupted; its log: {log_lines(session, name)[-20:]}")
        found = est.checkpoints()
        return len(found) >= 2 and found[-1].step >= INTERRUPT_AT

    wait_for(checkpointed, JOB_TIMEOUT_S, f"two checkpoints of {name}, the latest >= step "
                                          f"{INTERRUPT_AT}")
    stop()
    job = wait_until_ended(session, name)
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped", "Stopped"), job
    assert_no_processes(session.home)
    found = est.checkpoints()
    steps = [c.step for c in found]
    latest = steps[-1]
    assert latest >= INTERRUPT_AT and latest < STEPS - 1, steps  # stopped mid-training
    assert len(steps) >= 2 and steps == list(range(latest - len(steps) + 1, latest + 1)), steps
    assert starts(session, job) == dict.fromkeys(range(len(hosts_of(job))))
    seen = losses(log_lines(session, name))
    assert sorted(seen)[:latest + 1] == list(range(latest + 1)), sorted(seen)
    assert_loss_curve(seen)
    return Interrupted(name, latest, seen)


def assert_resumed(session: LocalSession, est: PyTorch, name: str, first: Interrupted) -> None:
    """Job `name`, started after `first` with the same checkpoint_s3_uri, began right after
    `first`'s latest complete checkpoint and carried its loss on, then completed."""
    job = wait_until_ended(session, name)
    lines = log_lines(session, name)
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-30:])
    assert_no_processes(session.home)
    # Every rank, each on its own host, loaded the latest checkpoint its host brought down.
    assert starts(session, job) == dict.fromkeys(range(len(hosts_of(job))), first.latest)
    seen = losses(lines)
    assert sorted(seen) == list(range(first.latest + 1, STEPS)), sorted(seen)
    resumed = seen[first.latest + 1]
    # One step on from where the first job's checkpoint left off, not the initial loss again.
    assert math.isclose(resumed, first.losses[first.latest] / 4, rel_tol=1e-9), (
        resumed, first.losses[first.latest])
    assert resumed < expected_loss(0) / 1000
    for step in set(seen) & set(first.losses):  # steps both ran: the very same numbers
        assert math.isclose(seen[step], first.losses[step], rel_tol=1e-12), step
    assert_loss_curve(seen)
    assert [c.step for c in est.checkpoints()] == list(range(STEPS - KEEP, STEPS))
