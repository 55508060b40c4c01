"""The CreateTrainingJob request: built in the SageMaker API's own shape, checked by botocore.

`build_request` is pure (no I/O); `validate_request` checks it against botocore's SageMaker
service model, the same check a boto3 client makes before sending, and turns a failure into one
line. The shape follows the official SDK's `Session._get_train_request`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ddpjob.errors import UserInputError

OPERATION = "CreateTrainingJob"
DEFAULT_VOLUME_SIZE_GB = 30  # the official SDK's default
INPUT_MODE = "File"


def build_request(
    *,
    job_name: str,
    image_uri: str,
    role: str,
    instance_type: str,
    instance_count: int,
    output_path: str,
    hyperparameters: Mapping[str, str],
    channels: Sequence[Mapping[str, Any]] = (),
    max_run: int,
    max_wait: int | None = None,
    use_spot_instances: bool = False,
    max_retry_attempts: int | None = None,
    environment: Mapping[str, str] | None = None,
    tags: Sequence[Mapping[str, str]] | None = None,
    checkpoint_s3_uri: str | None = None,
    checkpoint_local_path: str | None = None,
) -> dict[str, Any]:
    """A CreateTrainingJob request from already checked values (keys in the official order)."""
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": max_run}
    if max_wait:
        stopping["MaxWaitTimeInSeconds"] = max_wait
    request: dict[str, Any] = {
        "AlgorithmSpecification": {"TrainingInputMode": INPUT_MODE, "TrainingImage": image_uri},
        "OutputDataConfig": {"S3OutputPath": output_path},
        "TrainingJobName": job_name,
        "StoppingCondition": stopping,
        "ResourceConfig": {
            "VolumeSizeInGB": DEFAULT_VOLUME_SIZE_GB,
            "InstanceCount": instance_count,
            "InstanceType": instance_type,
        },
        "RoleArn": role,
    }
    if channels:
        request["InputDataConfig"] = [dict(channel) for channel in channels]
    if hyperparameters:
        request["HyperParameters"] = dict(hyperparameters)
    if environment:
        request["Environment"] = dict(environment)
    if tags:
        request["Tags"] = [dict(tag) for tag in tags]
    if use_spot_instances:
        request["EnableManagedSpotTraining"] = True
    if checkpoint_s3_uri:
        request["CheckpointConfig"] = {"S3Uri": checkpoint_s3_uri}
        if checkpoint_local_path:
            request["CheckpointConfig"]["LocalPath"] = checkpoint_local_path
    if max_retry_attempts is not None:
        request["RetryStrategy"] = {"MaximumRetryAttempts": max_retry_attempts}
    return request


@functools.lru_cache(maxsize=1)
def _input_shape() -> Any:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model(OPERATION).input_shape


def validate_request(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return `request` when botocore's model accepts it; else one-line UserInputError."""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(dict(request), _input_shape())
    if report.has_errors():
        lines = [line.strip() for line in report.generate_report().splitlines()]
        problems = "; ".join(line for line in lines if line and not line.endswith(":"))
        raise UserInputError(f"invalid {OPERATION} request, nothing was sent: {problems}")
    return request
