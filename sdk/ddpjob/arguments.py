"""The official estimator's vocabulary as a table: argument -> request member, check, local mode.

Each row is one constructor argument of `sagemaker.estimator.EstimatorBase` / `Framework` that
maps onto the CreateTrainingJob request. The estimator checks every row's value when it is made,
merges each row's part into the request it builds, and `attach` reads each row back from a
DescribeTrainingJob response. A new argument is one row; the README's table is
`markdown_table()`.

Besides the rows: the v1 names the official SDK renames with a warning (`RENAMED`), and the
keyword arguments it accepts and drops (`DROPPED`), accepted here with the same warning.
"""

from __future__ import annotations

import difflib
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ddpjob import validation
from ddpjob.errors import UserInputError

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
    return {"InputDataConfig": [{
        "ChannelName": values.get("model_channel_name") or "model",
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": value,
                                        "S3DataDistributionType": "FullyReplicated"}},
        "ContentType": "application/x-sagemaker-model",
        "InputMode": "File",
    }]}


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


ROWS: tuple[Argument, ...] = (
    _member("volume_size", "ResourceConfig.VolumeSizeInGB",
            lambda v: validation.positive_int(v, "volume_size", high=16384), NO_EFFECT,
            default=30),
    _member("volume_kms_key", "ResourceConfig.VolumeKmsKeyId", _str("volume_kms_key"),
            NO_EFFECT),
    _member("keep_alive_period_in_seconds", "ResourceConfig.KeepAlivePeriodInSeconds",
            lambda v: validation.optional_int(v, "keep_alive_period_in_seconds", low=0,
                                              high=3600), NO_EFFECT),
    _member("instance_groups", "ResourceConfig.InstanceGroups", _instance_groups,
            "refused: local mode runs one group (instance_type, instance_count)"),
    _member("output_kms_key", "OutputDataConfig.KmsKeyId", _str("output_kms_key"), NO_EFFECT),
    Argument("disable_output_compression", "OutputDataConfig.CompressionType",
             lambda v: bool(validation.optional_bool(v, "disable_output_compression")),
             lambda v, _: {"OutputDataConfig": {"CompressionType": "NONE"}} if v else {},
             lambda d: _read("OutputDataConfig.CompressionType")(d) == "NONE",
             "honoured: model/output written uncompressed", default=False),
    Argument("subnets", "VpcConfig.Subnets", _list("subnets"), _vpc_part("Subnets"),
             _read("VpcConfig.Subnets"), NO_EFFECT),
    Argument("security_group_ids", "VpcConfig.SecurityGroupIds", _list("security_group_ids"),
             _vpc_part("SecurityGroupIds"), _read("VpcConfig.SecurityGroupIds"), NO_EFFECT),
    _member("enable_network_isolation", "EnableNetworkIsolation",
            _bool("enable_network_isolation"), NO_EFFECT),
    _member("encrypt_inter_container_traffic", "EnableInterContainerTrafficEncryption",
            _bool("encrypt_inter_container_traffic"), NO_EFFECT),
    _member("metric_definitions", "AlgorithmSpecification.MetricDefinitions",
            validation.metric_definitions, "regexes matched against every host's log"),
    _member("enable_sagemaker_metrics", "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries",
            _bool("enable_sagemaker_metrics"), NO_EFFECT),
    _member("input_mode", "AlgorithmSpecification.TrainingInputMode", _input_mode,
            "File only; Pipe and FastFile refused", default="File"),
    _member("tensorboard_output_config", "TensorBoardOutputConfig",
            validation.tensorboard_output_config,
            ("LocalPath (`$DDPJOB_TENSORBOARD_DIR`) uploaded to S3OutputPath every 2 s and at the "
             "end, from the first host")),
    Argument("debugger_hook_config", "DebugHookConfig", _debugger_hook,
             _debugger_hook_part, _read("DebugHookConfig"),
             NO_EFFECT),
    Argument("disable_profiler", "ProfilerConfig.DisableProfiler", _bool("disable_profiler"),
             lambda v, _: {"ProfilerConfig": {"DisableProfiler": True}} if v else {},
             _read("ProfilerConfig.DisableProfiler"), NO_EFFECT),
    _member("profiler_config", "ProfilerConfig",
            lambda v: validation.request_dict(v, "profiler_config"), NO_EFFECT),
    _member("checkpoint_local_path", "CheckpointConfig.LocalPath",
            validation.checkpoint_local_path,
            "the host's checkpoint folder (a folder below /opt/ml, no `..`)"),
    _member("enable_infra_check", "InfraCheckConfig.EnableInfraCheck",
            _bool("enable_infra_check"), NO_EFFECT),
    _member("enable_remote_debug", "RemoteDebugConfig.EnableRemoteDebug",
            _bool("enable_remote_debug"), NO_EFFECT),
    _member("enable_session_tag_chaining", "SessionChainingConfig.EnableSessionTagChaining",
            _bool("enable_session_tag_chaining"), NO_EFFECT),
    _member("training_plan", "ResourceConfig.TrainingPlanArn", _str("training_plan"),
            NO_EFFECT),
    _member("training_repository_access_mode",
            "AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAccessMode",
            _str("training_repository_access_mode"), NO_EFFECT),
    _member("training_repository_credentials_provider_arn",
            "AlgorithmSpecification.TrainingImageConfig.TrainingRepositoryAuthConfig."
            "TrainingRepositoryCredentialsProviderArn",
            _str("training_repository_credentials_provider_arn"), NO_EFFECT),
    Argument("model_uri", "InputDataConfig[model channel]", _str("model_uri"), _model_channel,
             lambda _: None, "a channel like any other"),
    Argument("model_channel_name", "InputDataConfig[].ChannelName", _str("model_channel_name"),
             lambda v, _: {}, lambda _: None, "a channel like any other", default="model"),
)
BY_NAME = {row.name: row for row in ROWS}

#: The parameters of `Estimator` and `PyTorch` that are not rows and that a job spec (YAML) can
#: hold: no session, and no argument that only takes an official SDK object (compiler_config).
PARAMETERS = frozenset({
    "entry_point", "source_dir", "dependencies", "git_config", "hyperparameters",
    "instance_count", "instance_type", "distribution", "role", "image_uri", "output_path",
    "code_location", "base_job_name", "environment", "max_run", "checkpoint_s3_uri", "tags",
    "use_spot_instances", "max_wait", "max_retry_attempts", "container_log_level",
    "framework_version", "py_version",
})
#: Every estimator argument a job spec may name: the parameters and the table's rows.
SPEC_KEYS = PARAMETERS | frozenset(BY_NAME)

#: The official SDK's v1 names -> v2 names (`sagemaker.deprecations.renamed_kwargs`).
RENAMED = {
    "train_instance_count": "instance_count",
    "train_instance_type": "instance_type",
    "train_max_run": "max_run",
    "train_use_spot_instances": "use_spot_instances",
    "train_max_wait": "max_wait",
    "train_volume_size": "volume_size",
    "train_volume_kms_key": "volume_kms_key",
    "image_name": "image_uri",
}
#: Keyword arguments seen in notebooks that the official estimators accept and ignore (their
#: `**kwargs`): accepted with a warning. `job_name`/`wait`/`logs` belong to `fit()`.
DROPPED = frozenset({"job_name", "wait", "logs", "model_dir", "env", "experiment_config",
                     "image_scope", "train_volume_kms_key_id", "py_version_warning"})


def _warn(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=4)
    logger.warning(message)


def rename_v1(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the v1 names from `kwargs`; return their values under the v2 names, warning as
    the official SDK does (the v1 value wins, as there)."""
    renamed = {}
    for old, new in RENAMED.items():
        if old in kwargs:
            if new in kwargs:
                raise UserInputError(f"give {new} or its old name {old}, not both")
            renamed[new] = kwargs.pop(old)
            _warn(f"{old} has been renamed in sagemaker>=2 (ddpjob follows: use {new}).")
    return renamed


def drop_ignored(kwargs: dict[str, Any]) -> None:
    """Remove the arguments the official SDK ignores, with a warning naming each."""
    for name in sorted(DROPPED & set(kwargs)):
        kwargs.pop(name)
        hint = " (pass it to fit())" if name in ("job_name", "wait", "logs") else ""
        _warn(f"{name} is not an estimator argument; ignored, as the official SDK ignores "
              f"it{hint}")


#: Official SDK arguments that ddpjob refuses (each would change what runs in a way it cannot
#: honour). Every other official argument is accepted: see `arguments`.
UNSUPPORTED_ARGUMENTS = frozenset({
    "container_entry_point", "container_arguments", "checkpoint_s3_uri_kms_key",
    "training_recipe", "recipe_overrides", "instance_placement_config", "algorithm_arn",
    "tensorflow_version",
})
#: Official SDK arguments of services ddpjob does not drive: accepted and not sent, with a
#: warning, so that a notebook's estimator call still builds (the training itself is the same).
NOT_SENT = {"rules": "SageMaker Debugger rules are not run by ddpjob jobs"}


def reject_unknown(kwargs: dict[str, Any], known: list[str]) -> None:
    """Take what is left in `kwargs` after the parameters and the rows: an unsupported official
    argument or a near-miss of a known one (a typo) is one error; anything else is dropped
    with a warning, as the official SDK's `**kwargs` drops it silently."""
    for name in sorted(kwargs):
        if name in UNSUPPORTED_ARGUMENTS:
            raise UserInputError(f"{name} is an argument of the official SageMaker SDK that "
                                 f"is not supported by ddpjob; remove it")
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            raise UserInputError(f"unexpected argument {name!r} (did you mean {close[0]!r}?); "
                                 f"see help(ddpjob.PyTorch) for the arguments ddpjob accepts")
        kwargs.pop(name)
        why = NOT_SENT.get(name, "it is not an estimator argument")
        _warn(f"{name} ignored: {why} (the official SDK accepts and drops unknown arguments)")


def check(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every row's checked value (its default when not given)."""
    checked = {row.name: row.check(values.get(row.name, row.default)) for row in ROWS}
    if (checked["subnets"] is None) != (checked["security_group_ids"] is None):
        # The official SDK drops a VpcConfig with one half; a VPC job needs both.
        raise UserInputError("subnets and security_group_ids go together: give both (a job "
                             "in a VPC needs its subnets and security groups) or neither")
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
    """The request members that the rows' (checked) values set; `values["output_path"]` is the
    job's output location (the official SDK's default for some of them)."""
    part: dict[str, Any] = {}
    for row in ROWS:
        merge(part, row.to_request(values.get(row.name), values))
    return part


def from_description(description: Mapping[str, Any]) -> dict[str, Any]:
    """The rows' values that give this DescribeTrainingJob response (for attach)."""
    found = {row.name: row.from_request(description) for row in ROWS}
    return {name: value for name, value in found.items()
            if value is not None and value != BY_NAME[name].default}


def markdown_table() -> str:
    """The README's table of these arguments."""
    lines = ["| argument | request member | local mode |", "|---|---|---|"]
    lines += [f"| `{row.name}` | `{row.member}` | {row.local} |" for row in ROWS]
    return "\n".join(lines)


def log_no_local_effect(request: Mapping[str, Any]) -> None:
    """Log the members of `request` that have no effect on this machine (the table's "local
    mode" column; what local mode refuses is `ddpjob.local.refusals`)."""
    for row in ROWS:
        if row.local == NO_EFFECT and _read(row.member)(request) not in (None, row.default):
            logger.warning("%s has no effect on this machine (local mode)", row.name)


if __name__ == "__main__":  # python -m ddpjob.arguments: the README's table
    print(markdown_table())
