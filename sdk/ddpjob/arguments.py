"""The official estimator's vocabulary as a table: argument -> request member, check, local mode.

Each row is one constructor argument of `sagemaker.estimator.EstimatorBase` / `Framework`. The
estimator checks every row's value when it is made (`check`), `plan` merges every row's part into
the request (`request_part`), `attach` reads every row back from a DescribeTrainingJob response
(`from_description`), and docs/arguments.md's table is `markdown_table()`. The first rows
(`FIELDS`) are fields of the job definition; it carries the others' values as `members`. A new
argument is one row. The official SDK's names that are not arguments: `official_kwargs`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpjob_runtime.shared import contract, storage
from ddpjob_runtime.shared.hyperparameters import check_user_hyperparameters, decode, is_reserved

from ddpjob import backends, gitsource, naming, validation
from ddpjob.definition import DEFAULT_MAX_RUN
from ddpjob.distribution import NAMES as DISTRIBUTION_NAMES
from ddpjob.distribution import distribution_from_hyperparameters
from ddpjob.errors import UserInputError
from ddpjob.inputs import s3_prefix_channel

logger = logging.getLogger(__name__)

Values = Mapping[str, Any]
NO_EFFECT = "accepted; no effect on this machine (logged)"


@dataclass(frozen=True)
class Argument:
    """One estimator argument: how it is checked, where it goes, what local mode does."""

    name: str
    member: str  # the request member(s) it sets, as documentation
    check: Callable[[Any], Any]
    to_request: Callable[[Any, Values], dict[str, Any]]
    from_request: Callable[[Mapping[str, Any]], Any]
    local: str
    default: Any = None


def _path_value(path: str, value: Any) -> dict[str, Any]:
    result: Any = value
    for key in reversed(path.split(".")):
        result = {key: result}
    return result


def _read(path: str) -> Callable[[Mapping[str, Any]], Any]:
    def read(description: Mapping[str, Any]) -> Any:
        node: Any = description
        for key in path.split("."):
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
        return node
    return read


def _member(name: str, path: str, check: Callable[[Any], Any], local: str,
            default: Any = None) -> Argument:
    """A row whose (non-None) value is the request member at `path` as is."""
    def to_request(value: Any, _: Values) -> dict[str, Any]:
        return {} if value is None else _path_value(path, value)
    return Argument(name, path, check, to_request, _read(path), local, default)


def _debugger_hook(value: Any) -> Any:
    """False switches SageMaker Debugger's hook off (nothing is sent); a config is sent."""
    if value is None or value is False:
        return value
    return validation.request_dict(value, "debugger_hook_config")


def _debugger_hook_part(value: Any, values: Values) -> dict[str, Any]:
    """As the official SDK: a hook config without S3OutputPath writes to the job's output_path."""
    if not value:
        return {}
    return {"DebugHookConfig": {**value,
                                "S3OutputPath": value.get("S3OutputPath") or values["output_path"]}}


def _vpc_part(key: str) -> Callable[[Any, Values], dict[str, Any]]:
    return lambda value, _: {} if value is None else {"VpcConfig": {key: value}}


def _model_channel(value: Any, values: Values) -> dict[str, Any]:
    if value is None:
        return {}
    channel = s3_prefix_channel(values.get("model_channel_name") or "model", value)
    return {"InputDataConfig": [{**channel, "ContentType": "application/x-sagemaker-model",
                                 "InputMode": "File"}]}


def _input_mode(value: Any) -> str:
    if value not in ("File", "Pipe", "FastFile"):
        raise UserInputError(f"input_mode must be 'File', 'Pipe' or 'FastFile', got {value!r}")
    return value


def _instance_groups(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise UserInputError("instance_groups must be a list of InstanceGroup (or dicts)")
    return [validation.request_dict(group, "instance_groups") for group in value]


def _bool(name: str) -> Callable[[Any], Any]:
    return lambda value: validation.optional_bool(value, name)


def _str(name: str) -> Callable[[Any], Any]:
    return lambda value: validation.optional_str(value, name)


def _list(name: str) -> Callable[[Any], Any]:
    return lambda value: validation.string_list(value, name)


_NOT_READ: Callable[[Mapping[str, Any]], Any] = lambda _: None  # noqa: E731 - attach omits it


def _field(name: str, member: str, check: Callable[[Any], Any], local: str,
           read: Callable[[Mapping[str, Any]], Any] = _NOT_READ, default: Any = None) -> Argument:
    """A row with no member of its own: `plan` builds the code's hyperparameters and the job's
    name from it."""
    return Argument(name, member, check, lambda value, _: {}, read, local, default)


def _given(name: str, path: str, check: Callable[[Any], Any], local: str,
           read: Callable[[Mapping[str, Any]], Any], default: Any = None) -> Argument:
    """A row whose value, unless empty or False, is the request member at `path`."""
    return Argument(name, path, check, lambda value, _: _path_value(path, value) if value else {},
                    read, local, default)


def _hyperparameter(name: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda description: decode(description.get("HyperParameters") or {}).get(name)


def _user_hyperparameters(description: Mapping[str, Any]) -> dict[str, Any]:
    decoded = decode(description.get("HyperParameters") or {})
    return {name: value for name, value in decoded.items()
            if not is_reserved(name) and name not in DISTRIBUTION_NAMES}


def _distribution(description: Mapping[str, Any]) -> dict[str, Any] | None:
    return distribution_from_hyperparameters(decode(description.get("HyperParameters") or {}))


def _instance_type(value: Any) -> str:
    if backends.for_instance_type(value) is None:
        raise UserInputError(f"instance_type {value!r} is not allowed: use "
                             f"{backends.INSTANCE_TYPES_ALLOWED}")
    return value


def _spot(value: Any) -> bool:
    if not isinstance(value, bool):
        raise UserInputError(f"use_spot_instances must be True or False, got {value!r}")
    return value


def _location(name: str) -> Callable[[Any], storage.Location | None]:
    """The folder URI parsed once (plain paths are file:// locations)."""
    return lambda value: None if value is None else storage.parse(value, argument=name)


def _int(name: str, **bounds: int) -> Callable[[Any], Any]:
    return lambda value: validation.positive_int(value, name, **bounds)


def _optional_int(name: str, **bounds: int) -> Callable[[Any], Any]:
    return lambda value: validation.optional_int(value, name, **bounds)


def _no_effect(name: str, path: str,
               check: Callable[[str], Callable[[Any], Any]] = _bool) -> Argument:
    """A row of a member that local mode accepts and ignores; `check(name)` checks it."""
    return _member(name, path, check(name), NO_EFFECT)


_IDENTITY: Callable[[Any], Any] = lambda value: value  # noqa: E731 - checked with its partners
_RUNS = "honoured"
_SPOT = "honoured: rehearse interruptions (`interrupt`, `Interruption`; docs/spot.md)"
_MAX_WAIT = "honoured: bounds the whole job, interruptions included (MaxWaitTimeExceeded)"
_CODE = "HyperParameters.sagemaker_submit_directory"
#: The rows that are fields of the job definition: every parameter of `Estimator.__init__`.
FIELDS: tuple[Argument, ...] = (
    _member("instance_type", "ResourceConfig.InstanceType", _instance_type,
            "'local' (CPU, gloo) or 'local_gpu' (NCCL)"),
    _member("instance_count", "ResourceConfig.InstanceCount", _int("instance_count"),
            "that many local hosts", default=1),
    _member("image_uri", "AlgorithmSpecification.TrainingImage", _str("image_uri"),
            "ddpjob's runtime, or SageMaker's PyTorch container's toolkit"),
    _member("max_run", "StoppingCondition.MaxRuntimeInSeconds", _int("max_run"),
            "honoured: the job is stopped (MaxRuntimeExceeded)", default=DEFAULT_MAX_RUN),
    _given("use_spot_instances", "EnableManagedSpotTraining", _spot, _SPOT,
           _read("EnableManagedSpotTraining"), default=False),
    _member("max_wait", "StoppingCondition.MaxWaitTimeInSeconds", _optional_int("max_wait"),
            _MAX_WAIT),
    _field("entry_point", "HyperParameters.sagemaker_program", _IDENTITY, _RUNS,
           _hyperparameter(contract.PROGRAM)),
    _field("source_dir", _CODE, _IDENTITY, _RUNS, _hyperparameter(contract.SUBMIT_DIRECTORY)),
    _field("dependencies", _CODE, _IDENTITY, _RUNS),
    _field("git_config", _CODE, gitsource.check, "cloned when the job is planned"),
    _given("hyperparameters", "HyperParameters", check_user_hyperparameters, _RUNS,
           _user_hyperparameters),
    _field("distribution", "HyperParameters.sagemaker_*", _IDENTITY,
           "see `distribution` below", _distribution),
    _member("role", "RoleArn", _str("role"), "not needed"),
    _field("base_job_name", "TrainingJobName",
           lambda v: None if v is None else naming.check_base_job_name(v), _RUNS),
    _given("environment", "Environment", validation.environment, _RUNS, _read("Environment")),
    _member("max_retry_attempts", "RetryStrategy.MaximumRetryAttempts",
            _optional_int("max_retry_attempts", high=30), "honoured: the whole job is retried"),
    _field("container_log_level", "HyperParameters.sagemaker_container_log_level",
           _int("container_log_level", low=0), _RUNS,
           _hyperparameter(contract.CONTAINER_LOG_LEVEL), default=logging.INFO),
    _given("tags", "Tags", validation.tags, "kept with the job", _NOT_READ),
    _member("output_path", "OutputDataConfig.S3OutputPath", _location("output_path"),
            "a file:// folder (default: the local home)"),
    _field("code_location", _CODE, _location("code_location"), "a file:// folder"),
    _member("checkpoint_s3_uri", "CheckpointConfig.S3Uri", _location("checkpoint_s3_uri"),
            "a file:// or s3:// folder, synced with the host's checkpoint folder"),
)
ROWS: tuple[Argument, ...] = FIELDS + (
    _member("volume_size", "ResourceConfig.VolumeSizeInGB", _int("volume_size", high=16384),
            NO_EFFECT, default=30),
    _no_effect("volume_kms_key", "ResourceConfig.VolumeKmsKeyId", _str),
    _member("keep_alive_period_in_seconds", "ResourceConfig.KeepAlivePeriodInSeconds",
            _optional_int("keep_alive_period_in_seconds", low=0, high=3600),
            "honoured: the job's hosts stay warm that long for the next matching job (warm "
            "pools)"),
    _member("instance_groups", "ResourceConfig.InstanceGroups", _instance_groups,
            "refused: local mode runs one group (instance_type, instance_count)"),
    _no_effect("output_kms_key", "OutputDataConfig.KmsKeyId", _str),
    Argument("disable_output_compression", "OutputDataConfig.CompressionType",
             lambda v: bool(validation.optional_bool(v, "disable_output_compression")),
             lambda v, _: {"OutputDataConfig": {"CompressionType": "NONE"}} if v else {},
             lambda d: _read("OutputDataConfig.CompressionType")(d) == "NONE",
             "honoured: model/output written uncompressed", default=False),
    Argument("subnets", "VpcConfig.Subnets", _list("subnets"), _vpc_part("Subnets"),
             _read("VpcConfig.Subnets"), NO_EFFECT),
    Argument("security_group_ids", "VpcConfig.SecurityGroupIds", _list("security_group_ids"),
             _vpc_part("SecurityGroupIds"), _read("VpcConfig.SecurityGroupIds"), NO_EFFECT),
    _no_effect("enable_network_isolation", "EnableNetworkIsolation"),
    _no_effect("encrypt_inter_container_traffic", "EnableInterContainerTrafficEncryption"),
    _member("metric_definitions", "AlgorithmSpecification.MetricDefinitions",
            validation.metric_definitions, "regexes matched against every host's log"),
    _no_effect("enable_sagemaker_metrics",
               "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries"),
    _member("input_mode", "AlgorithmSpecification.TrainingInputMode", _input_mode,
            "File only; Pipe and FastFile refused", default="File"),
    _member("tensorboard_output_config", "TensorBoardOutputConfig",
            validation.tensorboard_output_config,
            ("LocalPath (`$DDPJOB_TENSORBOARD_DIR`) uploaded to S3OutputPath every 2 s and at the "
             "end, from the first host")),
    Argument("debugger_hook_config", "DebugHookConfig", _debugger_hook,
             _debugger_hook_part, _read("DebugHookConfig"),
             NO_EFFECT),
    _given("disable_profiler", "ProfilerConfig.DisableProfiler", _bool("disable_profiler"),
           NO_EFFECT, _read("ProfilerConfig.DisableProfiler")),
    _member("profiler_config", "ProfilerConfig",
            lambda v: validation.request_dict(v, "profiler_config"), NO_EFFECT),
    _member("checkpoint_local_path", "CheckpointConfig.LocalPath",
            validation.checkpoint_local_path,
            "the host's checkpoint folder (a folder below /opt/ml, no `..`)"),
    _no_effect("enable_infra_check", "InfraCheckConfig.EnableInfraCheck"),
    _no_effect("enable_remote_debug", "RemoteDebugConfig.EnableRemoteDebug"),
    _no_effect("enable_session_tag_chaining", "SessionChainingConfig.EnableSessionTagChaining"),
    _no_effect("training_plan", "ResourceConfig.TrainingPlanArn", _str),
    _no_effect("training_repository_access_mode",
               "AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAccessMode", _str),
    _no_effect("training_repository_credentials_provider_arn",
               "AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAuthConfig."
               "TrainingRepositoryCredentialsProviderArn", _str),
    Argument("model_uri", "InputDataConfig[model channel]", _str("model_uri"), _model_channel,
             lambda _: None, "a channel like any other"),
    Argument("model_channel_name", "InputDataConfig[].ChannelName", _str("model_channel_name"),
             lambda v, _: {}, lambda _: None, "a channel like any other", default="model"),
)
BY_NAME = {row.name: row for row in ROWS}
#: The rows whose values are folder URIs, parsed once into `storage.Location`s.
LOCATIONS = ("output_path", "code_location", "checkpoint_s3_uri")

#: The parameters of `Estimator` and `PyTorch` that a job spec (YAML) can hold: no session,
#: and no argument that only takes an official SDK object (compiler_config).
PARAMETERS = frozenset(row.name for row in FIELDS) | {"framework_version", "py_version"}
#: The rows that are not fields of the job definition: it carries their values as `members`.
MEMBERS = tuple(row.name for row in ROWS if row not in FIELDS)
#: Every estimator argument a job spec may name: the parameters and the table's rows.
SPEC_KEYS = PARAMETERS | frozenset(BY_NAME)

def check(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every row's checked value (its default when not given)."""
    checked = {row.name: row.check(values.get(row.name, row.default)) for row in ROWS}
    if (checked["subnets"] is None) != (checked["security_group_ids"] is None):
        # The official SDK drops a VpcConfig with one half; a VPC job needs both.
        raise UserInputError("subnets and security_group_ids go together: give both (a job "
                             "in a VPC needs its subnets and security groups) or neither")
    max_wait, max_run = checked["max_wait"], checked["max_run"]
    if max_wait is not None and not checked["use_spot_instances"]:
        raise UserInputError("max_wait is only allowed with use_spot_instances=True")
    if max_wait is not None and max_wait < max_run:
        raise UserInputError(f"max_wait ({max_wait}) must be >= max_run ({max_run})")
    return checked


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


def request_part(values: Values) -> dict[str, Any]:
    """The request members that the rows' values set: `values` holds each row's value, checked,
    with what the scheduler resolved (`role`, `image_uri`, `output_path`, ...)."""
    part: dict[str, Any] = {}
    for row in ROWS:
        merge(part, row.to_request(values.get(row.name), values))
    return part


def from_description(description: Mapping[str, Any],
                     local_image: str | None = None) -> dict[str, Any]:
    """The constructor arguments that rebuild the estimator of this DescribeTrainingJob response
    (the official SDK's `_prepare_init_params_from_job_description`, for attach): its code is
    the stored archive; `local_image`, a backend's own image label, is no `image_uri`."""
    found = {row.name: row.from_request(description) for row in ROWS}
    if found["image_uri"] == local_image:
        found["image_uri"] = None
    return {name: value for name, value in found.items()  # "": SageMaker's unset KmsKeyId
            if value not in (None, "") and value != BY_NAME[name].default}


def markdown_table() -> str:
    """The table of these arguments in docs/arguments.md."""
    lines = ["| argument | request member | local mode |", "|---|---|---|"]
    lines += [f"| `{row.name}` | `{row.member}` | {row.local} |" for row in ROWS]
    return "\n".join(lines)


def log_no_local_effect(request: Mapping[str, Any]) -> None:
    """Log the members of `request` that have no effect on this machine (the table's "local
    mode" column; what local mode refuses is `ddpjob.local.control.refusals`)."""
    for row in ROWS:
        if row.local == NO_EFFECT and _read(row.member)(request) not in (None, row.default):
            logger.warning("%s has no effect on this machine (local mode)", row.name)


if __name__ == "__main__":  # python -m ddpjob.arguments: docs/arguments.md's table
    print(markdown_table())
