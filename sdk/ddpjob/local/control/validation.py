"""Requests to the local client: botocore's own checks, then what SageMaker's server would check.

Every request is checked here, whoever built it (ddpjob's estimator, the official SDK, boto3
code), and refused with an `InvalidRequestError` holding what SageMaker would answer (the
boto3-shaped client raises that as botocore's ParamValidationError or ClientError): shape errors
as a boto3 client finds them before sending, then the service model's own limits (`model_limits`:
lengths, counts, patterns, enums), then what local mode needs, each in one line naming the
member and what is allowed, before anything is written or started.
"""

from __future__ import annotations

import os
from typing import Any

from ddpjob_runtime.shared import contract
from ddpjob_runtime.shared.contract import JOB_NAME_PATTERN

from ddpjob import backends, image_uris
from ddpjob.errors import InvalidRequestError
from ddpjob.local.control import model_limits
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.isolation import gpus
from ddpjob.local.watch import metrics
from ddpjob.request import service_model

LOCAL_INSTANCE_TYPES = backends.LOCAL.instance_types  # what runs on this machine
URI_SCHEMES = ("s3://", "file://")
HOST_MEMORY = 512 * 2**20  # what one local host needs at least: an agent and a torch worker
LOOPBACK_HOSTS = 254  # 127.0.0.1-254, the addresses that name hosts on this machine


def client_error(operation: str, message: str) -> InvalidRequestError:
    """The refusal whose `message` is the ValidationException SageMaker's server would answer."""
    return InvalidRequestError(
        f"local mode rejected {operation}: {' '.join(message.split())} Change the argument it "
        f"names", code="ValidationException", operation=operation, service_message=message)


def check_shape(operation: str, params: dict[str, Any]) -> None:
    """Validate `params` against the operation's input shape, as boto3 does before sending,
    then against the model's bounds, patterns and enums, as SageMaker's server does (boto3
    checks no maximum: an UpdateTrainingJob keep-alive of a day reaches the server)."""
    from botocore.validate import ParamValidator

    shape = service_model().operation_model(operation).input_shape
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        text = report.generate_report()
        raise InvalidRequestError(
            f"Invalid {operation} request, nothing was sent: {' '.join(text.split())}",
            code="ParamValidationError", operation=operation, service_message=text)
    if isinstance(params.get("TrainingJobName"), str):  # in the service's own words
        check_job_name(operation, params["TrainingJobName"])
    if problem := model_limits.first_violation(shape, params):
        raise client_error(operation, problem)


def check_job_name(operation: str, name: str) -> None:
    if not isinstance(name, str) or not JOB_NAME_PATTERN.match(name):
        raise client_error(
            operation,
            f"1 validation error detected: Value '{name}' at 'trainingJobName' failed to satisfy "
            f"constraint: Member must satisfy regular expression pattern: "
            f"{JOB_NAME_PATTERN.pattern} (letters, digits and hyphens, at most 63 characters)")


def _check_uri(operation: str, field: str, uri: str) -> None:
    if not uri.startswith(URI_SCHEMES):
        raise client_error(
            operation, f"{field} {uri!r}: local mode reads and writes s3:// or file:// URIs")


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def max_local_hosts() -> int:
    """How many hosts one job may have on this machine: one per HOST_MEMORY of its memory (each
    host is at least an agent and one interpreter with torch), at most LOOPBACK_HOSTS."""
    return max(1, min(LOOPBACK_HOSTS, _memory_bytes() // HOST_MEMORY))


def _check_count(op: str, count: int) -> None:
    if count < 1:
        raise client_error(op, f"ResourceConfig.InstanceCount must be at least 1, got {count}")
    limit = max_local_hosts()
    if count > limit:
        raise client_error(
            op, f"ResourceConfig.InstanceCount {count}: this machine runs at most {limit} local "
                f"hosts (one per {HOST_MEMORY // 2**20} MiB of its {_memory_bytes() / 2**30:.1f} "
                f"GiB of memory, "
                f"and at most {LOOPBACK_HOSTS}, the loopback addresses 127.0.0.1-254)")


def _check_channels(op: str, channels: list[dict[str, Any]]) -> None:
    """Each channel becomes the folder `input/data/<name>`: one per name, and no name that
    leaves that folder; local mode reads S3DataSource URIs."""
    seen: set[str] = set()
    for channel in channels:
        name = channel["ChannelName"]
        if name in (".", ".."):
            raise client_error(
                op, f"InputDataConfig channel {name!r}: a channel name must name a folder in "
                    f"input/data (letters, digits, '.', '-', '_'; not '.' or '..')")
        if name in seen:
            raise client_error(op, f"InputDataConfig channel {name!r} is given twice: channel "
                                   f"names must be unique")
        seen.add(name)
        s3 = channel.get("DataSource", {}).get("S3DataSource")
        if s3 is None:
            raise client_error(
                op, f"InputDataConfig channel {name!r}: local mode supports S3DataSource only "
                    f"(s3:// or file:// URIs)")
        _check_uri(op, f"InputDataConfig channel {name!r}", s3["S3Uri"])


def check_gpus(request: dict[str, Any], visible_gpus: int) -> None:
    """What this machine must have for a request: a GPU for each host of a GPU type."""
    resources = request["ResourceConfig"]
    kind, count = resources.get("InstanceType"), resources.get("InstanceCount", 1)
    if visible_gpus < count and gpus.uses_gpus(str(kind)):
        raise client_error(
            "CreateTrainingJob",
            f"ResourceConfig.InstanceType {kind!r} with InstanceCount {count} needs at least "
            f"{count} GPU(s) on this machine, one set per simulated host; found {visible_gpus} "
            f"(CUDA_VISIBLE_DEVICES, else nvidia-smi)")


def check_create(request: dict[str, Any], visible_gpus: int | None = None) -> None:
    """What SageMaker's server checks in a CreateTrainingJob request, and what local mode needs.

    `visible_gpus` is the number of GPUs of this machine (for `local_gpu` and GPU instance
    types; None: not checked).
    """
    op = "CreateTrainingJob"
    check_job_name(op, request["TrainingJobName"])
    shape = service_model().operation_model(op).input_shape
    if problem := model_limits.first_violation(shape, request):
        raise client_error(op, problem)
    resources = request.get("ResourceConfig")
    if not resources:
        raise client_error(op, "ResourceConfig is required (InstanceType, InstanceCount)")
    if "InstanceGroups" in resources:
        raise client_error(op, "ResourceConfig.InstanceGroups: local mode runs one group only; "
                               "use InstanceType and InstanceCount")
    kind, count = resources.get("InstanceType"), resources.get("InstanceCount", 1)
    _check_count(op, count)
    hosts = hostkind.of(request)
    if problem := hosts.problem(request) or metrics.check(request):
        raise client_error(op, problem)
    cpu = str(kind).startswith("ml.") and image_uris.processor(kind) == "cpu"
    if kind not in LOCAL_INSTANCE_TYPES and not cpu and not hosts.runs_image_program:
        raise client_error(
            op,
            f"ResourceConfig.InstanceType {kind!r} cannot run in local mode: use 'local' or a "
            f"CPU type such as 'ml.m5.xlarge' (CPU, gloo), 'local_gpu' (NCCL, this machine's "
            f"GPUs), or a SageMaker Session for {kind!r}")
    if visible_gpus is not None:
        check_gpus(request, visible_gpus)
    hps = request.get("HyperParameters") or {}
    if hosts.needs_program and not hps.get(contract.PROGRAM):
        raise client_error(
            op, "HyperParameters.sagemaker_program (the entry point script) is required in "
                "local mode unless AlgorithmSpecification.ContainerEntrypoint names the "
                "container's command: local hosts run the ddpjob runtime or SageMaker's "
                "PyTorch toolkit, which run that script")
    _check_uri(op, "OutputDataConfig.S3OutputPath", request["OutputDataConfig"]["S3OutputPath"])
    _check_channels(op, request.get("InputDataConfig") or [])
    checkpoint = request.get("CheckpointConfig")
    if checkpoint:
        _check_uri(op, "CheckpointConfig.S3Uri", checkpoint["S3Uri"])
    _check_max_wait(op, request)


def _check_max_wait(op: str, request: dict[str, Any]) -> None:
    """StoppingCondition.MaxWaitTimeInSeconds: spot jobs only, and >= MaxRuntimeInSeconds."""
    stopping = request.get("StoppingCondition") or {}
    wait, run = stopping.get("MaxWaitTimeInSeconds"), stopping.get("MaxRuntimeInSeconds")
    if wait is None:
        return
    if not request.get("EnableManagedSpotTraining"):
        raise client_error(op, "StoppingCondition.MaxWaitTimeInSeconds is only allowed with "
                               "EnableManagedSpotTraining set to true")
    if run is not None and wait < run:
        raise client_error(op, f"StoppingCondition.MaxWaitTimeInSeconds ({wait}) must be "
                               f"greater than or equal to MaxRuntimeInSeconds ({run})")
