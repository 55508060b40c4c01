"""`TuningJob`: a started hyperparameter tuning job, followed through its session (Describe,
Stop, waiting by polling), as the official SDK v2's `_TuningJob` and `wait_for_tuning_job`."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ddpjob.errors import DdpjobError, UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.base_session import BaseSession

logger = logging.getLogger(__name__)

#: HyperParameterTuningJobStatus values after which nothing changes (the v3 SDK's list).
TERMINAL = frozenset({"Completed", "Failed", "Stopped", "DeleteFailed"})


class TuningJobFailedError(DdpjobError):
    """A tuning job ended Failed (the official SDK's UnexpectedStatusException)."""

    def __init__(self, name: str, status: str, reason: str):
        self.job_name, self.status, self.reason = name, status, reason
        super().__init__(f"Hyperparameter tuning job {name} ended {status}: "
                         f"{reason or 'SageMaker gave no FailureReason'}")


class TuningJob:
    """A tuning job by name on a session (a `Session`; local ones are planned)."""

    def __init__(self, session: BaseSession, name: str, poll_seconds: float | None = None):
        self.session = session
        self.name = name
        self.poll_seconds = session.backend.poll_seconds if poll_seconds is None \
            else poll_seconds

    def describe(self) -> dict[str, Any]:
        """The DescribeHyperParameterTuningJob response."""
        return self.session.describe_tuning_job(self.name)

    def stop(self) -> None:
        """Stop the tuning job and its running training jobs."""
        self.session.stop_tuning_job(self.name)

    def wait(self) -> dict[str, Any]:
        """Poll until the job ends; return its description. Failed raises
        TuningJobFailedError; Stopped is returned with a warning (as the official SDK)."""
        while True:
            described = self.describe()
            status = described["HyperParameterTuningJobStatus"]
            if status in TERMINAL:
                break
            time.sleep(self.poll_seconds)
        if status in ("Failed", "DeleteFailed"):
            raise TuningJobFailedError(self.name, status, described.get("FailureReason", ""))
        if status == "Stopped":
            logger.warning("Tuning job %s ended Stopped rather than Completed", self.name)
        return described

    def best_training_job(self) -> str:
        """The name of the best training job so far (UserInputError while there is none)."""
        best = self.describe().get("BestTrainingJob")
        if not best:
            raise UserInputError(f"best training job not available for tuning job {self.name}: "
                                 f"no training job has reported the objective metric yet")
        return best["TrainingJobName"]
