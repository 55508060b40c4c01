"""The small surface every control plane offers, so the estimator never asks which it holds."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from typing import Any

TERMINAL_STATUSES = frozenset({"Completed", "Failed", "Stopped"})


class BaseSession(abc.ABC):
    """A control plane for training jobs: SageMaker (`Session`) or this machine (`LocalSession`)."""

    #: True when jobs run on this machine (no Docker, no cloud account).
    local: bool = False

    @property
    @abc.abstractmethod
    def sagemaker_client(self) -> Any:
        """A boto3-shaped SageMaker client: create/describe/stop/list training jobs."""

    @abc.abstractmethod
    def default_output_path(self) -> str:
        """Where jobs write outputs when the estimator names no `output_path` (a folder URI)."""

    @abc.abstractmethod
    def iter_logs(self, job_name: str, follow: bool = True) -> Iterator[tuple[str, str]]:
        """Yield `(host, line)` of every host of the job, in arrival order.

        With `follow`, keep waiting for new lines until the job is terminal and its logs are
        drained; without, yield what exists now and return.
        """

    @abc.abstractmethod
    def create_training_job(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Send a CreateTrainingJob request (SageMaker's shape); return the response."""

    @abc.abstractmethod
    def list_training_jobs(self, **kwargs: Any) -> list[dict[str, Any]]:
        """Every TrainingJobSummary that ListTrainingJobs returns for `kwargs` (all pages)."""

    @property
    def region_name(self) -> str | None:
        """The AWS region the session talks to, when there is one."""
        return None

    def default_role(self) -> str | None:
        """The IAM role used when the estimator names none (None: a role is required)."""
        return None

    def expand_role(self, role: str) -> str:
        """The role as CreateTrainingJob takes it (SageMaker's Session expands a bare name)."""
        return role

    # --- the estimator's questions: what this backend runs and where data goes ---------------

    #: URI schemes this backend reads and writes (outputs, checkpoints, code).
    uri_schemes: tuple[str, ...] = ("s3",)
    #: Whether local files given as inputs are uploaded first (else read in place).
    stages_local_inputs: bool = True

    def accepts_instance_type(self, instance_type: str) -> bool:
        """Whether this backend runs `instance_type` (SageMaker: the `ml.*` types)."""
        return instance_type.startswith("ml.")

    def planned_output_path(self) -> str:
        """Where `default_output_path()` is, found without creating anything (the dry run)."""
        return self.default_output_path()

    def check_request(self, request: Mapping[str, Any], *, submit: bool = False) -> None:
        """Refuse (UserInputError) what this backend cannot run, before any upload; with
        `submit`, also what it needs to start the job here. Pure."""
        return None

    def describe_training_job(self, job_name: str) -> dict[str, Any]:
        """The DescribeTrainingJob response of `job_name`."""
        return self.sagemaker_client.describe_training_job(TrainingJobName=job_name)

    def stop_training_job(self, job_name: str) -> None:
        """Ask the control plane to stop `job_name`."""
        self.sagemaker_client.stop_training_job(TrainingJobName=job_name)
