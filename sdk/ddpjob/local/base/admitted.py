"""A CreateTrainingJob request admitted once: the frozen, typed job every room reads.

The control plane checks a request and then parses it here, once (`admit`); `job.json` beside
the job's `request.json` holds the result. The supervisor, the hosts, staging, the host roots,
the warm pools and the hosts' platform duties read this object, never the request's dict (the
request itself is kept for the answers that echo it: DescribeTrainingJob, ListTrainingJobs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpjob_runtime.shared import contract
from ddpjob_runtime.shared.hyperparameters import decode

from ddpjob.local.base.templates import HASH_SEED_ENV

DEFAULT_CHECKPOINT_PATH = "/opt/ml/checkpoints"


@dataclass(frozen=True)
class Channel:
    """One input channel and where it comes from (`S3Uri`: `s3://`, `file://` or a path)."""

    name: str
    uri: str
    input_mode: str = "File"
    distribution: str = "FullyReplicated"
    record_wrapper: str = "None"


@dataclass(frozen=True)
class Checkpoint:
    """`CheckpointConfig`: where checkpoints are kept, and where the hosts see them."""

    s3_uri: str
    local_path: str = DEFAULT_CHECKPOINT_PATH


@dataclass(frozen=True)
class AdmittedJob:
    """What a local job is, as admitted: read by everything that runs it."""

    name: str
    hosts: tuple[str, ...]  # algo-1 ... algo-N, as SageMaker names a job's hosts
    instance_type: str
    host_kind: str  # `hostkinds.hostkind.HostKind.name`
    hyperparameters: dict[str, str]  # as sent (the official SDK JSON-encodes every value)
    submit_directory: str | None  # decoded `sagemaker_submit_directory`
    environment: dict[str, str]
    channels: tuple[Channel, ...]
    output_path: str
    checkpoint: Checkpoint | None
    tensorboard: dict[str, Any] | None  # `TensorBoardOutputConfig`
    metric_definitions: tuple[tuple[str, str], ...]  # (Name, Regex)
    spot: bool
    max_runtime_s: int | None
    max_wait_s: int | None  # spot jobs only
    max_pending_s: int | None
    max_retries: int  # `RetryStrategy.MaximumRetryAttempts`
    keep_alive_s: int  # `ResourceConfig.KeepAlivePeriodInSeconds`
    pool_key: str | None  # what a warm pool must match (None: no keep-alive, or spot)
    algorithm: dict[str, Any] = field(default_factory=dict)  # image, entry point, arguments

    @property
    def hash_seed(self) -> str | None:
        """The job's PYTHONHASHSEED, when its Environment fixes one."""
        return self.environment.get(HASH_SEED_ENV)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AdmittedJob:
        """The job `to_json` wrote (ValueError when it is not one)."""
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, Mapping) or set(data) != names:
            raise ValueError("not an admitted job's record")
        checkpoint = data["checkpoint"]
        return cls(**{
            **data, "hosts": tuple(data["hosts"]),
            "channels": tuple(Channel(**c) for c in data["channels"]),
            "checkpoint": Checkpoint(**checkpoint) if checkpoint else None,
            "metric_definitions": tuple((n, r) for n, r in data["metric_definitions"]),
        })


def _channel(config: Mapping[str, Any], mode: str) -> Channel:
    source = config["DataSource"]["S3DataSource"]
    return Channel(config["ChannelName"], source["S3Uri"], config.get("InputMode") or mode,
                   source.get("S3DataDistributionType", "FullyReplicated"),
                   config.get("RecordWrapperType", "None"))


def host_names(request: Mapping[str, Any]) -> tuple[str, ...]:
    """`algo-1` … `algo-N`, as SageMaker names a job's hosts."""
    return tuple(f"algo-{i + 1}" for i in range(request["ResourceConfig"].get("InstanceCount", 1)))


def admit(request: Mapping[str, Any], host_kind: str, pool_key: str | None) -> AdmittedJob:
    """Parse a checked CreateTrainingJob request, once (the checks are the control plane's)."""
    resources, stopping = request["ResourceConfig"], request.get("StoppingCondition") or {}
    algorithm = request.get("AlgorithmSpecification") or {}
    hyperparameters = dict(request.get("HyperParameters") or {})
    checkpoint = request.get("CheckpointConfig")
    spot = bool(request.get("EnableManagedSpotTraining"))
    source = decode(hyperparameters).get(contract.SUBMIT_DIRECTORY)
    return AdmittedJob(
        name=request["TrainingJobName"],
        hosts=host_names(request),
        instance_type=resources["InstanceType"], host_kind=host_kind,
        hyperparameters=hyperparameters,
        submit_directory=source if isinstance(source, str) else None,
        environment=dict(request.get("Environment") or {}),
        channels=tuple(_channel(c, algorithm.get("TrainingInputMode", "File"))
                       for c in request.get("InputDataConfig") or []),
        output_path=request["OutputDataConfig"]["S3OutputPath"],
        checkpoint=Checkpoint(checkpoint["S3Uri"],
                              checkpoint.get("LocalPath") or DEFAULT_CHECKPOINT_PATH)
        if checkpoint else None,
        tensorboard=dict(request.get("TensorBoardOutputConfig") or {}) or None,
        metric_definitions=tuple((d["Name"], d["Regex"])
                                 for d in algorithm.get("MetricDefinitions") or []),
        spot=spot, max_runtime_s=stopping.get("MaxRuntimeInSeconds"),
        max_wait_s=stopping.get("MaxWaitTimeInSeconds") if spot else None,
        max_pending_s=stopping.get("MaxPendingTimeInSeconds"),
        max_retries=int((request.get("RetryStrategy") or {}).get("MaximumRetryAttempts", 0)),
        keep_alive_s=int(resources.get("KeepAlivePeriodInSeconds") or 0), pool_key=pool_key,
        algorithm={k: algorithm[k] for k in ("TrainingImage", "ContainerEntrypoint",
                                             "ContainerArguments") if k in algorithm},
    )  # fmt: skip
