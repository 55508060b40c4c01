"""The CreateTrainingJob request: built in the SageMaker API's own shape, checked by botocore.

`build_request` (what `planner.plan` calls) is pure (no I/O); `validate_request` checks it
against botocore's SageMaker service model, the same check a boto3 client makes before sending,
and turns a failure into one line. The shape follows the official SDK's
`Session._get_train_request`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ddpjob.definition import JobDefinition
from ddpjob.errors import UserInputError

OPERATION = "CreateTrainingJob"


def merge(target: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge `part` into `target`: dicts merge, lists append, other values replace."""
    for key, value in part.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        elif isinstance(value, list) and isinstance(target.get(key), list):
            target[key].extend(value)
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value
    return target


def build_request(definition: JobDefinition, *, image: str, role: str, output_path: str,
                  hyperparameters: Mapping[str, str], channels: Sequence[Mapping[str, Any]],
                  members: Mapping[str, Any]) -> dict[str, Any]:
    """A CreateTrainingJob request (keys in the official order) for `definition`, with what the
    scheduler resolved, and `members` (the argument table's part: volume, VPC, metrics, ...)
    merged in. Pure: no I/O."""
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": definition.stopping.max_run}
    if definition.stopping.max_wait:
        stopping["MaxWaitTimeInSeconds"] = definition.stopping.max_wait
    resources = definition.resources
    request: dict[str, Any] = {
        "AlgorithmSpecification": {"TrainingImage": image},
        "OutputDataConfig": {"S3OutputPath": output_path},
        "TrainingJobName": definition.name,
        "StoppingCondition": stopping,
        "ResourceConfig": {"InstanceCount": resources.instance_count,
                           "InstanceType": resources.instance_type},
        "RoleArn": role,
    }
    if channels:
        request["InputDataConfig"] = [dict(channel) for channel in channels]
    if hyperparameters:
        request["HyperParameters"] = dict(hyperparameters)
    if definition.environment:
        request["Environment"] = dict(definition.environment)
    if definition.tags:
        request["Tags"] = [dict(tag) for tag in definition.tags]
    if definition.stopping.use_spot_instances:
        request["EnableManagedSpotTraining"] = True
    if definition.checkpoint is not None:
        request["CheckpointConfig"] = {"S3Uri": definition.checkpoint.uri}
    if definition.stopping.max_retry_attempts is not None:
        request["RetryStrategy"] = {
            "MaximumRetryAttempts": definition.stopping.max_retry_attempts}
    merge(request, members)
    if "InstanceGroups" in request["ResourceConfig"]:  # groups replace type and count
        for key in ("InstanceType", "InstanceCount"):
            request["ResourceConfig"].pop(key)
    if "LocalPath" in request.get("CheckpointConfig", {}) and definition.checkpoint is None:
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
