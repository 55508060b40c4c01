"""A submitted training job: describe it, follow its status and logs, stop it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ddpjob import log_lines
from ddpjob.errors import DdpjobError, JobFailedError
from ddpjob.job_status import JobDescription, TrainingJobStatus

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.backends import Backend

logger = logging.getLogger(__name__)


def _say(message: str) -> None:
    """Status lines go to the notebook/terminal (print) and to logging."""
    print(message, flush=True)
    logger.info(message)


def job_failure(job: JobDescription) -> JobFailedError | None:
    """The JobFailedError of a job that ended Failed or Stopped, else None."""
    if not job.is_terminal or job.status is TrainingJobStatus.COMPLETED:
        return None
    reason = (job.failure_reason or job.secondary_status).strip()
    return JobFailedError(job.name, job.status, reason or job.status)


class WaitTimeoutError(DdpjobError, TimeoutError):
    """A job was still running when `timeout` seconds of waiting had passed."""


class JobControl(Protocol):
    """What a job is followed through: a session's backend (its `poll_seconds`), its reading
    methods and `stop`."""

    @property
    def backend(self) -> Backend: ...

    def describe(self, job_name: str) -> JobDescription: ...

    def logs(self, job_name: str, follow: bool = True) -> Iterator[tuple[str, str]]: ...

    def stop(self, job_name: str) -> None: ...


class TrainingJob:
    """A training job of a session; what `estimator.latest_training_job` holds."""

    def __init__(self, session: JobControl, name: str, poll_seconds: float | None = None):
        self.session = session
        self.name = name
        self.poll_seconds = session.backend.poll_seconds if poll_seconds is None else poll_seconds
        self._last_status: tuple[str, str] | None = None

    def __repr__(self) -> str:
        return f"TrainingJob({self.name!r})"

    @property
    def job_name(self) -> str:
        """The job's name (the official SDK's `latest_training_job.job_name`)."""
        return self.name

    def describe(self) -> dict[str, Any]:
        """The DescribeTrainingJob response."""
        return dict(self.session.describe(self.name).raw)

    def _report(self, job: JobDescription) -> None:
        status = (job.status, job.secondary_status)
        if status != self._last_status:
            self._last_status = status
            detail = f" - {status[1]}" if status[1] and status[1] != status[0] else ""
            _say(f"{self.name}: {status[0]}{detail}")

    def wait(self, logs: bool = True) -> dict[str, Any]:
        """Block until the job ends, printing status changes (and, with `logs`, every host's
        lines as `[algo-1] line`); return the final description.

        Raises JobFailedError when the job ends Failed or Stopped.
        """
        self._report(self.session.describe(self.name))
        if logs:
            last_poll = time.monotonic()
            for host, line in self.session.logs(self.name, follow=True):
                print(log_lines.shown(host, line), flush=True)
                if time.monotonic() - last_poll >= self.poll_seconds:
                    self._report(self.session.describe(self.name))
                    last_poll = time.monotonic()
        job = self.until_ended()
        failure = job_failure(job)
        if failure is not None:
            raise failure
        print_times(job.raw)
        return dict(job.raw)

    def until_ended(self, deadline: float | None = None) -> JobDescription:
        """The job's description once it has ended, printing status changes on the way (the one
        status printer of this package); WaitTimeoutError when the monotonic `deadline` passes
        first."""
        while True:
            job = self.session.describe(self.name)
            self._report(job)
            if job.is_terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                print(f"Timeout Exceeded. Job {self.name} is still {job.status}.", flush=True)
                raise WaitTimeoutError(f"training job {self.name} is still {job.status} when "
                                       f"the timeout ends: wait again, or stop it")
            left = self.poll_seconds if deadline is None else deadline - time.monotonic()
            time.sleep(max(0.0, min(self.poll_seconds, left)))

    def logs(self) -> None:
        """Print every log line of the job so far, each prefixed with its host."""
        for host, line in self.session.logs(self.name, follow=False):
            print(log_lines.shown(host, line), flush=True)

    def stop(self) -> None:
        """Ask the control plane to stop the job (it ends Stopped)."""
        self.session.stop(self.name)
        _say(f"{self.name}: stop requested")


def print_times(job: Mapping[str, Any]) -> None:
    """The lines the official SDK's `logs_for_job` prints once a job it waited for ended:
    training and billable seconds of all hosts, and a spot job's savings."""
    count = (job.get("ResourceConfig") or {}).get("InstanceCount", 1)
    training, billable = job.get("TrainingTimeInSeconds"), job.get("BillableTimeInSeconds")
    if training is not None:
        print("Training seconds:", training * count)
    if billable is not None:
        print("Billable seconds:", billable * count)
        if job.get("EnableManagedSpotTraining") and training:
            print(f"Managed Spot Training savings: {(1 - billable / training) * 100:.1f}%")

