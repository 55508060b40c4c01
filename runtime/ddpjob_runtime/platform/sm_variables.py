"""Render a `TrainingEnvironment` into the `SM_*` variables of SageMaker's training toolkit.

Names and formats follow `sagemaker_training.environment.Environment.to_env_vars` and
`sagemaker_training.mapping` (toolkit 5.x): strings raw, `None` empty, anything else compact
key-sorted ASCII JSON; `SM_TRAINING_ENV` is the toolkit's `dict(Environment())`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from typing import Any

from ddpjob_runtime.platform.environment import TrainingEnvironment
from ddpjob_runtime.shared import contract

log = logging.getLogger(__name__)

# The toolkit's SAGEMAKER_HYPERPARAMETERS: its own settings, kept out of SM_FRAMEWORK_PARAMS.
TOOLKIT_HYPERPARAMETERS = (
    contract.PROGRAM, contract.SUBMIT_DIRECTORY, "sagemaker_enable_cloudwatch_metrics",
    contract.REGION, contract.CONTAINER_LOG_LEVEL, contract.JOB_NAME, "default_user_module_name",
    contract.TUNING_OBJECTIVE, "sagemaker_s3_output")
_DISTRIBUTION_FLAGS = (
    contract.MPI, "sagemaker_parameter_server_enabled", contract.SMDDP, contract.PYTORCH_DDP,
    contract.PYTORCH_XLA, "sagemaker_multi_worker_mirrored_strategy_enabled",
    contract.TORCH_DISTRIBUTED)
# The folders of `training_env`, the environment's attributes of the same name.
_FOLDERS = ("input_config_dir", "input_dir", "model_dir", "output_data_dir", "output_dir",
            "output_intermediate_dir")
# The `training_env` keys that are also `SM_<KEY>` variables as they are.
_SAME_KEYS = (
    "current_host", "current_instance_type", "current_instance_group",
    "current_instance_group_hosts", "instance_groups", "instance_groups_dict",
    "distribution_instance_groups", "is_hetero", "module_name", "log_level", "framework_module",
    "input_dir", "input_config_dir", "output_dir", "num_cpus", "num_gpus", "num_neurons",
    "model_dir", "module_dir", "output_intermediate_dir", "hosts", "network_interface_name",
    "user_entry_point", "resource_config", "input_data_config", "output_data_dir")


def env_value(value: object) -> str:
    """One value as the toolkit writes it into an environment variable."""
    if isinstance(value, bytes):
        return value.decode("latin1")
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _arg_text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("latin1") if isinstance(value, bytes) else str(value)


def user_args(hyperparameters: dict[str, Any]) -> list[str]:
    """The script's arguments, as the toolkit's `to_cmd_args`: sorted `--key value` pairs."""
    args = []
    for key in sorted(hyperparameters):
        name = _arg_text(key)
        args.append(("--" if len(name) > 1 else "-") + name if name else "")
        value = hyperparameters[key]
        if hasattr(value, "items"):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append(_arg_text(value))
    return args


def framework_params(env: TrainingEnvironment) -> dict[str, Any]:
    """Reserved hyperparameters that are not the toolkit's own settings (distribution flags, …)."""
    return {k: v for k, v in env.reserved_hyperparameters.items()
            if k not in TOOLKIT_HYPERPARAMETERS}


def num_gpus() -> int:
    """GPUs on this host, counted like the toolkit (`nvidia-smi --list-gpus`); 0 without it.

    Where `CUDA_VISIBLE_DEVICES` is set (a local host's share of the machine's GPUs; "" on
    `local`), at most the GPUs it names: nvidia-smi lists every GPU of the machine, and a
    worker per listed GPU would put two NCCL ranks on one device.
    """
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True,
                             timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    listed = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return listed
    return min(listed, len([g for g in visible.split(",") if g.strip() not in ("", "-1")]))


def _instance_groups(env: TrainingEnvironment, params: dict[str, Any]) -> dict[str, Any]:
    """The toolkit's heterogeneous-cluster fields."""
    config = env.resource_config
    current_group = config.get("current_group_name", "homogeneousCluster")
    groups = config.get("instance_groups", [])
    distribution_groups = params.get("sagemaker_distribution_instance_groups")
    if distribution_groups is None:
        enabled = any(params.get(flag, False) for flag in _DISTRIBUTION_FLAGS)
        distribution_groups = [current_group] if enabled else []
    distribution_hosts = [h for g in groups if g["instance_group_name"] in distribution_groups
                          for h in g["hosts"]] if groups else env.hosts
    names = [g["instance_group_name"] for g in groups]
    return {
        "current_instance_group": current_group,
        "current_instance_group_hosts": next(
            (g["hosts"] for g in groups if g["instance_group_name"] == current_group), []),
        "instance_groups": names,
        "instance_groups_dict": {g["instance_group_name"]: g for g in groups},
        "distribution_instance_groups": distribution_groups,
        "distribution_hosts": distribution_hosts,
        "is_hetero": len(names) > 1,
        "master_hostname": (distribution_hosts or env.hosts)[0],
    }


def training_env(env: TrainingEnvironment, gpus: int, cpus: int) -> dict[str, Any]:
    """The toolkit's `dict(Environment())`: what `SM_TRAINING_ENV` holds."""
    hps = env.hyperparameters
    params = framework_params(env)
    program = hps.get(contract.PROGRAM)
    mp_parameters = os.environ.get("SM_HP_MP_PARAMETERS")
    groups = _instance_groups(env, params)
    return {
        **groups,  # current_instance_group(_hosts), distribution_*, instance_groups*, is_hetero
        **{folder: str(getattr(env, folder)) for folder in _FOLDERS},
        "additional_framework_parameters": params,
        "channel_input_dirs": {c: str(env.channel_dir(c)) for c in env.input_data_config},
        "current_host": env.current_host,
        "current_instance_type": env.resource_config.get("current_instance_type", "local"),
        "framework_module": os.environ.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": env.hosts,
        "hyperparameters": env.user_hyperparameters,
        "input_data_config": env.input_data_config,
        "is_master": env.current_host == groups["master_hostname"],
        "is_modelparallel_enabled": mp_parameters and mp_parameters != "{}",
        "is_smddpmprun_installed": shutil.which("smddpmprun") is not None,
        "is_smddprun_installed": shutil.which("smddprun") is not None,
        "job_name": os.environ.get(contract.ENV_TRAINING_JOB_NAME),
        "log_level": hps.get(contract.CONTAINER_LOG_LEVEL, logging.INFO),
        "module_dir": str(hps.get(contract.SUBMIT_DIRECTORY, env.code_dir)),
        "module_name": str(program).removesuffix(".py"),
        "network_interface_name": env.resource_config.get("network_interface_name", "eth0"),
        "num_cpus": cpus,
        "num_gpus": gpus,
        "num_neurons": 0,  # Trainium/Inferentia cores: not a target of this runtime
        "resource_config": env.resource_config,
        "topology": env.resource_config.get("topology", []),
        "user_entry_point": program,
    }


def render(env: TrainingEnvironment, gpus: int, cpus: int | None = None) -> dict[str, str]:
    """Every `SM_*` variable the toolkit exports, for this host."""
    if cpus is None:
        cpus = os.cpu_count() or 1
    full = training_env(env, gpus, cpus)
    values: dict[str, Any] = {
        "hps": full["hyperparameters"],
        "framework_params": full["additional_framework_parameters"],
        "channels": sorted(full["channel_input_dirs"]),
        "training_env": full,
        "user_args": user_args(full["hyperparameters"]),
    }
    values.update((key, full[key]) for key in _SAME_KEYS)
    if full["topology"]:
        values["topology"] = full["topology"]
    for channel, path in full["channel_input_dirs"].items():
        values[f"channel_{channel}"] = path
    for name, value in full["hyperparameters"].items():
        values[f"hp_{name}"] = value
    return {f"SM_{str(k).upper()}": env_value(v) for k, v in values.items()}
