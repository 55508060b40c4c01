"""Requests to the local client: botocore's own checks, then what SageMaker's server would check.

Shape errors raise `botocore.exceptions.ParamValidationError`, exactly as a boto3 client does
before sending; content errors raise the `ClientError` (`ValidationException`) SageMaker would
answer, with a message naming the field and what local mode allows.
"""

from __future__ import annotations

from typing import Any

from ddpjob_runtime import contract
from ddpjob_runtime.contract import JOB_NAME_PATTERN

from ddpjob import image_uris
from ddpjob.local import dlc_host, metrics
from ddpjob.request import service_model

LOCAL_INSTANCE_TYPES = ("local", "local_gpu")  # what runs on this machine
URI_SCHEMES = ("s3://", "file://")


def client_error(operation: str, message: str, code: str = "ValidationException") -> Exception:
    """The botocore ClientError SageMaker's server would raise."""
    from botocore.exceptions import ClientError

    return ClientError(
        {"Error": {"Code": code, "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": 400}},
        operation,
    )  # fmt: skip


def check_shape(operation: str, params: dict[str, Any]) -> None:
    """Validate `params` against the operation's input shape, as boto3 does before sending."""
    from botocore.exceptions import ParamValidationError
    from botocore.validate import ParamValidator

    shape = service_model().operation_model(operation).input_shape
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        raise ParamValidationError(report=report.generate_report())


def check_job_name(operation: str, name: str) -> None:
    """SageMaker's pattern for training job names."""
    if not isinstance(name, str) or not JOB_NAME_PATTERN.match(name):
        raise client_error(
            operation,
            f"1 validation error detected: Value '{name}' at 'trainingJobName' failed to satisfy "
            f"constraint: Member must satisfy regular expression pattern: "
            f"{JOB_NAME_PATTERN.pattern} (letters, digits and hyphens, at most 63 characters)",
        )


def _check_uri(operation: str, field: str, uri: str) -> None:
    if not uri.startswith(URI_SCHEMES):
        raise client_error(
            operation, f"{field} {uri!r}: local mode reads and writes s3:// or file:// URIs"
        )


def _check_hyperparameters(op: str, hps: dict[str, str]) -> None:
    """SageMaker's limits: at most 100, names up to 256 characters, values up to 2500."""
    if len(hps) > contract.MAX_HYPERPARAMETERS:
        raise client_error(
            op, f"HyperParameters: {len(hps)} given, SageMaker allows at most "
                f"{contract.MAX_HYPERPARAMETERS}"
        )
    for name, value in hps.items():
        if len(name) > contract.MAX_HYPERPARAMETER_NAME:
            raise client_error(
                op, f"HyperParameters: name {name[:40]!r}... is {len(name)} characters long, "
                    f"at most {contract.MAX_HYPERPARAMETER_NAME} are allowed",
            )  # fmt: skip
        if len(value) > contract.MAX_HYPERPARAMETER_VALUE:
            raise client_error(
                op, f"HyperParameters: the value of {name!r} is {len(value)} characters long, "
                    f"at most {contract.MAX_HYPERPARAMETER_VALUE} are allowed",
            )  # fmt: skip


def check_create(request: dict[str, Any], visible_gpus: int | None = None) -> None:
    """What SageMaker's server checks in a CreateTrainingJob request, and what local mode needs.

    `visible_gpus` is the number of GPUs of this machine (only needed for "local_gpu").
    """
    op = "CreateTrainingJob"
    check_job_name(op, request["TrainingJobName"])
    resources = request.get("ResourceConfig")
    if not resources:
        raise client_error(op, "ResourceConfig is required (InstanceType, InstanceCount)")
    if "InstanceGroups" in resources:
        raise client_error(op, "ResourceConfig.InstanceGroups: local mode runs one group only; "
                               "use InstanceType and InstanceCount")
    kind, count = resources.get("InstanceType"), resources.get("InstanceCount", 1)
    if problem := dlc_host.request_problem(request) or metrics.check(request):
        raise client_error(op, problem)
    cpu = str(kind).startswith("ml.") and image_uris.processor(kind) == "cpu"
    if kind not in LOCAL_INSTANCE_TYPES and not cpu and not dlc_host.is_dlc_request(request):
        raise client_error(
            op,
            f"ResourceConfig.InstanceType {kind!r} cannot run in local mode: use 'local' or a "
            f"CPU type such as 'ml.m5.xlarge' (CPU, gloo), 'local_gpu' (NCCL, this machine's "
            f"GPUs), or a SageMaker Session for {kind!r}",
        )
    if count < 1:
        raise client_error(op, f"ResourceConfig.InstanceCount must be at least 1, got {count}")
    if kind == "local_gpu" and (visible_gpus or 0) < count:
        raise client_error(
            op,
            f"InstanceType 'local_gpu' with InstanceCount {count} needs at least {count} "
            f"GPU(s), one set per simulated host; this machine has {visible_gpus or 0}",
        )
    hps = request.get("HyperParameters") or {}
    _check_hyperparameters(op, hps)
    if not hps.get("sagemaker_program"):
        raise client_error(
            op, "HyperParameters.sagemaker_program (the entry point script) is required in "
                "local mode: local hosts run the ddpjob runtime, not a training image",
        )  # fmt: skip
    _check_uri(op, "OutputDataConfig.S3OutputPath", request["OutputDataConfig"]["S3OutputPath"])
    for channel in request.get("InputDataConfig") or []:
        source = channel.get("DataSource", {})
        s3 = source.get("S3DataSource")
        if s3 is None:
            raise client_error(
                op, f"InputDataConfig channel {channel['ChannelName']!r}: local mode supports "
                    f"S3DataSource only (s3:// or file:// URIs)",
            )  # fmt: skip
        _check_uri(op, f"InputDataConfig channel {channel['ChannelName']!r}", s3["S3Uri"])
    checkpoint = request.get("CheckpointConfig")
    if checkpoint:
        _check_uri(op, "CheckpointConfig.S3Uri", checkpoint["S3Uri"])
