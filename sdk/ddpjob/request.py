"""The CreateTrainingJob request: built in the SageMaker API's own shape, checked by botocore.

`build_request` is pure (no I/O); `validate_request` checks it against botocore's SageMaker
service model, the same check a boto3 client makes before sending, and turns a failure into one
line. The shape follows the official SDK's `Session._get_train_request`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddpjob.arguments import merge
from ddpjob.errors import UserInputError

OPERATION = "CreateTrainingJob"


@dataclass(frozen=True)
class JobSpec:
    """The members every request has, already checked; the table's members come apart."""

    job_name: str
    image_uri: str
    role: str
    instance_type: str
    instance_count: int
    output_path: str
    hyperparameters: Mapping[str, str]
    max_run: int
    channels: Sequence[Mapping[str, Any]] = ()
    max_wait: int | None = None
    use_spot_instances: bool = False
    max_retry_attempts: int | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    tags: Sequence[Mapping[str, str]] = ()
    checkpoint_s3_uri: str | None = None


def build_request(spec: JobSpec, members: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A CreateTrainingJob request (keys in the official order), with `members` (the argument
    table's part: volume, VPC, metrics, ...) merged in. Pure: no I/O."""
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": spec.max_run}
    if spec.max_wait:
        stopping["MaxWaitTimeInSeconds"] = spec.max_wait
    request: dict[str, Any] = {
        "AlgorithmSpecification": {"TrainingImage": spec.image_uri},
        "OutputDataConfig": {"S3OutputPath": spec.output_path},
        "TrainingJobName": spec.job_name,
        "StoppingCondition": stopping,
        "ResourceConfig": {"InstanceCount": spec.instance_count,
                           "InstanceType": spec.instance_type},
        "RoleArn": spec.role,
    }
    if spec.channels:
        request["InputDataConfig"] = [dict(channel) for channel in spec.channels]
    if spec.hyperparameters:
        request["HyperParameters"] = dict(spec.hyperparameters)
    if spec.environment:
        request["Environment"] = dict(spec.environment)
    if spec.tags:
        request["Tags"] = [dict(tag) for tag in spec.tags]
    if spec.use_spot_instances:
        request["EnableManagedSpotTraining"] = True
    if spec.checkpoint_s3_uri:
        request["CheckpointConfig"] = {"S3Uri": spec.checkpoint_s3_uri}
    if spec.max_retry_attempts is not None:
        request["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_retry_attempts}
    merge(request, members or {})
    if "InstanceGroups" in request["ResourceConfig"]:  # groups replace type and count
        for key in ("InstanceType", "InstanceCount"):
            request["ResourceConfig"].pop(key)
    if "LocalPath" in request.get("CheckpointConfig", {}) and not spec.checkpoint_s3_uri:
        request.pop("CheckpointConfig")  # SageMaker needs S3Uri; a local path alone means nothing
    return request


@functools.lru_cache(maxsize=1)
def service_model() -> Any:
    """botocore's SageMaker service model (loaded once per process: it is large)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def _input_shape() -> Any:
    return service_model().operation_model(OPERATION).input_shape


def validate_request(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return `request` when botocore's model accepts it; else one-line UserInputError."""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(dict(request), _input_shape())
    if report.has_errors():
        lines = [line.strip() for line in report.generate_report().splitlines()]
        problems = "; ".join(line for line in lines if line and not line.endswith(":"))
        raise UserInputError(f"invalid {OPERATION} request, nothing was sent: {problems}")
    return request
