"""`LocalSageMakerClient`: boto3's SageMaker client for training and tuning jobs, run on this
machine.

A thin face over `LocalControlPlane` and `LocalTuningControlPlane` for code written against
boto3 (the official SageMaker SDK through `official_session()`, scripts): the same training-job
and tuning-job methods, each refusal raised as boto3 raises SageMaker's (`ClientError` with its
error code, `ParamValidationError`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpjob.errors import ControlPlaneError
from ddpjob.local.control import validation
from ddpjob.local.control.control_plane import LocalControlPlane
from ddpjob.local.tuning.tuning_plane import LocalTuningControlPlane
from ddpjob.request import service_model

if TYPE_CHECKING:  # pragma: no cover
    from botocore.errorfactory import BaseClientExceptions

    from ddpjob.local.base.interruptions import Interruption


class LocalSageMakerClient:
    """boto3's SageMaker client for training jobs (create, describe, stop, update, list) and
    tuning jobs whose jobs run as local processes under `home`; `control` and `tuning` answer
    them."""

    def __init__(self, home: str | Path, planned: Sequence[Interruption] = ()):
        self.control = LocalControlPlane(home, planned)
        self.tuning = LocalTuningControlPlane(self.control)

    @functools.cached_property
    def exceptions(self) -> BaseClientExceptions:
        """The error classes boto3's SageMaker client has (`ResourceInUse`, …)."""
        from botocore.errorfactory import ClientExceptionsFactory

        return ClientExceptionsFactory().create_client_exceptions(service_model())

    @property
    def bucket_root(self) -> Path:
        """The folder of the emulated `sagemaker-local` bucket of this client's home."""
        return self.control.bucket_root

    def create_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """CreateTrainingJob: the job starts in the background."""
        return self._answer(self.control.create_training_job, kwargs)

    def describe_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """DescribeTrainingJob."""
        return self._answer(self.control.describe_training_job, kwargs)

    def stop_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """StopTrainingJob."""
        return self._answer(self.control.stop_training_job, kwargs)

    def update_training_job(self, **kwargs: Any) -> dict[str, Any]:
        """UpdateTrainingJob (a warm pool's keep-alive)."""
        return self._answer(self.control.update_training_job, kwargs)

    def list_training_jobs(self, **kwargs: Any) -> dict[str, Any]:
        """ListTrainingJobs."""
        return self._answer(self.control.list_training_jobs, kwargs)

    def create_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """CreateHyperParameterTuningJob: its controller starts trials in the background."""
        return self._answer(self.tuning.create_hyper_parameter_tuning_job, kwargs)

    def describe_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """DescribeHyperParameterTuningJob."""
        return self._answer(self.tuning.describe_hyper_parameter_tuning_job, kwargs)

    def stop_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """StopHyperParameterTuningJob."""
        return self._answer(self.tuning.stop_hyper_parameter_tuning_job, kwargs)

    def list_training_jobs_for_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """ListTrainingJobsForHyperParameterTuningJob."""
        return self._answer(self.tuning.list_training_jobs_for_hyper_parameter_tuning_job,
                            kwargs)

    def list_hyper_parameter_tuning_jobs(self, **kwargs: Any) -> dict[str, Any]:
        """ListHyperParameterTuningJobs."""
        return self._answer(self.tuning.list_hyper_parameter_tuning_jobs, kwargs)

    def delete_hyper_parameter_tuning_job(self, **kwargs: Any) -> dict[str, Any]:
        """DeleteHyperParameterTuningJob."""
        return self._answer(self.tuning.delete_hyper_parameter_tuning_job, kwargs)

    def list_tags(self, **kwargs: Any) -> dict[str, Any]:
        """ListTags of a local training or tuning job: the Tags its request gave."""
        return self._answer(self._tags, kwargs)

    def _tags(self, **kwargs: Any) -> dict[str, Any]:
        validation.check_shape("ListTags", kwargs)
        kind, _, lowered = kwargs["ResourceArn"].rpartition(":")[2].partition("/")
        store = {"training-job": self.control.store,
                 "hyper-parameter-tuning-job": self.tuning.store}.get(kind)
        name = next((n for n in store.names() if n.lower() == lowered), None) if store else None
        if name is None:  # an ARN names its job in lower case
            raise validation.client_error("ListTags", f"No resource {kwargs['ResourceArn']} "
                                                      f"on this machine")
        return {"Tags": store.request(name).get("Tags") or [],
                "ResponseMetadata": {"HTTPStatusCode": 200, "RetryAttempts": 0}}

    def _answer(self, method: Callable[..., dict[str, Any]],
                kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            return method(**kwargs)
        except ControlPlaneError as error:
            raise self._aws_error(error) from None

    def _aws_error(self, error: ControlPlaneError) -> Exception:
        """The botocore error whose answer is `error`'s (what SageMaker would have said)."""
        if error.code == "ParamValidationError":
            from botocore.exceptions import ParamValidationError

            return ParamValidationError(report=error.service_message)
        response = {"Error": {"Code": error.code, "Message": error.service_message},
                    "ResponseMetadata": {"HTTPStatusCode": 400}}
        return self.exceptions.from_code(error.code)(response, error.operation)
