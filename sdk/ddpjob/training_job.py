"""A submitted training job: describe it, follow its status and logs, stop it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, Protocol

from ddpjob.errors import JobFailedError
from ddpjob.job_status import TERMINAL_STATUSES

logger = logging.getLogger(__name__)


def _say(message: str) -> None:
    """Status lines go to the notebook/terminal (print) and to logging."""
    print(message, flush=True)
    logger.info(message)


def job_failure(description: dict[str, Any]) -> JobFailedError | None:
    """The JobFailedError of a job that ended Failed or Stopped (its description), else None."""
    status = description["TrainingJobStatus"]
    if status not in TERMINAL_STATUSES - {"Completed"}:
        return None
    reason = str(description.get("FailureReason") or description.get("SecondaryStatus", ""))
    return JobFailedError(description["TrainingJobName"], status, reason.strip() or status)


class JobControl(Protocol):
    """What a job is followed through: a session's reading methods and `stop`."""

    poll_seconds: float

    def describe(self, job_name: str) -> dict[str, Any]: ...

    def logs(self, job_name: str, follow: bool = True) -> Iterator[tuple[str, str]]: ...

    def stop(self, job_name: str) -> None: ...


class TrainingJob:
    """A training job of a session; what `estimator.latest_training_job` holds."""

    def __init__(self, session: JobControl, name: str, poll_seconds: float | None = None):
        self.session = session
        self.name = name
        self.poll_seconds = session.poll_seconds if poll_seconds is None else poll_seconds
        self._last_status: tuple[str, str] | None = None

    def __repr__(self) -> str:
        return f"TrainingJob({self.name!r})"

    @property
    def job_name(self) -> str:
        """The job's name (the official SDK's `latest_training_job.job_name`)."""
        return self.name

    def describe(self) -> dict[str, Any]:
        """The DescribeTrainingJob response."""
        return self.session.describe(self.name)

    def _report(self, description: dict[str, Any]) -> None:
        status = (description["TrainingJobStatus"], description.get("SecondaryStatus", ""))
        if status != self._last_status:
            self._last_status = status
            detail = f" - {status[1]}" if status[1] and status[1] != status[0] else ""
            _say(f"{self.name}: {status[0]}{detail}")

    def wait(self, logs: bool = True) -> dict[str, Any]:
        """Block until the job ends, printing status changes (and, with `logs`, every host's
        lines as `[algo-1] line`); return the final description.

        Raises JobFailedError when the job ends Failed or Stopped.
        """
        description = self.describe()
        self._report(description)
        if logs:
            last_poll = time.monotonic()
            for host, line in self.session.logs(self.name, follow=True):
                print(f"[{host}] {line}", flush=True)
                if time.monotonic() - last_poll >= self.poll_seconds:
                    self._report(self.describe())
                    last_poll = time.monotonic()
        description = self.describe()
        while description["TrainingJobStatus"] not in TERMINAL_STATUSES:
            self._report(description)
            time.sleep(self.poll_seconds)
            description = self.describe()
        self._report(description)
        failure = job_failure(description)
        if failure is not None:
            raise failure
        return description

    def logs(self) -> None:
        """Print every log line of the job so far, each prefixed with its host."""
        for host, line in self.session.logs(self.name, follow=False):
            print(f"[{host}] {line}", flush=True)

    def stop(self) -> None:
        """Ask the control plane to stop the job (it ends Stopped)."""
        self.session.stop(self.name)
        _say(f"{self.name}: stop requested")
