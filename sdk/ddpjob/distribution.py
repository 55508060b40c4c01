"""The estimator's `distribution` dict <-> the `sagemaker_*` hyperparameters, both ways.

`distribution_hyperparameters` checks the dict strictly and returns what the official SDK
(2.257, `PyTorch._pytorch_distribution_configuration`) sends for it, raw (not yet JSON-encoded);
`distribution_from_hyperparameters` is its inverse, for `attach`. Accepted forms:

    {"torch_distributed": {"enabled": True}}
    {"pytorchddp": {"enabled": True}}        # sent as smdistributed dataparallel, like the SDK
    {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": ""}}}
    {"torch_distributed": {"enabled": True},
     "smdistributed": {"dataparallel": {"enabled": True}}}            # the SDK's p5 form
    {"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": ""}}
    {"smdistributed": {"modelparallel": {"enabled": True, "parameters": {...}}},
     "mpi": {...}} or {..., "torch_distributed": {"enabled": True}}   # SageMaker's SMP library
    {"pytorchxla": {"enabled": True}}   # SageMaker Training Compiler: ml.* and compiler_config

plus ddpjob's top-level `"processes_per_host": N` (workers per host, 1..MAX_PROCESSES_PER_HOST),
which becomes `ddpjob_processes_per_host` and, with no strategy enabled, implies torchrun, and
`"max_restarts": N` (0..100, default 0: worker restarts, torchrun's `--max_restarts`), which
becomes `ddpjob_max_restarts` (refused on SageMaker's DLC, whose toolkit does not restart).

On SageMaker's PyTorch DLC (`dlc=True`) the data-parallel forms become the toolkit's torchrun
launch (`sagemaker_torch_distributed_enabled`), since ddpjob's DDP library runs on
torch.distributed; mpi and modelparallel are sent as the official SDK sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.shared.contract import (  # the hyperparameter names, spelled once
    INSTANCE_TYPE,
    MAX_RESTARTS,
    MAX_RESTARTS_LIMIT,
    MPI,
    MPI_OPTIONS,
    MPI_PROCESSES,
    PROCESSES_PER_HOST,
    PYTORCH_DDP,
    PYTORCH_XLA,
    SMDDP,
    SMDDP_MPI_OPTIONS,
    TORCH_DISTRIBUTED,
)

from ddpjob import official_sdk
from ddpjob.errors import UserInputError

#: SageMaker's model-parallel library reads its parameters from this hyperparameter.
MP_PARAMETERS = "mp_parameters"
#: Workers per host: a p5/p4d host has 8 GPUs and the largest CPU hosts 192 vCPUs; more than 64
#: processes on one host is a typo, not a plan (each one is a full Python interpreter).
MAX_PROCESSES_PER_HOST = 64

STRATEGIES = ("torch_distributed", "pytorchddp", "smdistributed", "mpi", "pytorchxla")
_KEYS = {
    "torch_distributed": ("enabled",),
    "pytorchxla": ("enabled",),
    "pytorchddp": ("enabled", "custom_mpi_options"),
    "mpi": ("enabled", "processes_per_host", "custom_mpi_options"),
    "smdistributed.dataparallel": ("enabled", "custom_mpi_options"),
    "smdistributed.modelparallel": ("enabled", "parameters"),
}
_OTHER_STRATEGIES = ("parameter_server", "multi_worker_mirrored_strategy", "instance_groups")
#: Strategies that may be given together (SMP runs under mpi or torchrun; the SDK's p5 form).
_COMBINATIONS = ({"torch_distributed"}, {"smdistributed"}, {"mpi"}, {"pytorchxla"},
                 {"torch_distributed", "smdistributed"}, {"mpi", "smdistributed"})
_EXAMPLE = '{"torch_distributed": {"enabled": True}}'


def _fail(message: str) -> UserInputError:
    return UserInputError(f"distribution: {message}")


def _workers(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (
        1 <= value <= MAX_PROCESSES_PER_HOST
    ):
        raise _fail(f"{where} must be an integer between 1 and {MAX_PROCESSES_PER_HOST}, "
                    f"got {value!r}")
    return value


def _strategy_dict(value: Any, where: str) -> dict[str, Any]:
    """The strategy's dict, its keys and `enabled` checked."""
    if not isinstance(value, Mapping):
        raise _fail(f"{where} must be a dict such as {{'enabled': True}}, got {value!r}")
    allowed = _KEYS[where]
    unknown = sorted(set(value) - set(allowed), key=str)
    if unknown:
        raise _fail(f"{where} has unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}")
    if not isinstance(value.get("enabled"), bool):
        raise _fail(f"{where} needs 'enabled': True or False, got {value.get('enabled')!r}")
    if not value["enabled"] and len(value) > 1:
        others = ", ".join(sorted(k for k in value if k != "enabled"))
        raise _fail(f"{where} is disabled ('enabled': False) but sets {others}; "
                    f"enable it or remove them")
    if not isinstance(value.get("custom_mpi_options", ""), str):
        raise _fail(f"{where}['custom_mpi_options'] must be a string, got "
                    f"{value['custom_mpi_options']!r}")
    if "processes_per_host" in value:
        _workers(value["processes_per_host"], f"{where}['processes_per_host']")
    if not isinstance(value.get("parameters", {}), Mapping):
        raise _fail(f"{where}['parameters'] must be a dict")
    return dict(value)


def _smdistributed(value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or not value:
        raise _fail(f"smdistributed must be a dict such as {{'dataparallel': {{'enabled': True}}}},"
                    f" got {value!r}")
    unknown = sorted(set(value) - {"dataparallel", "modelparallel"}, key=str)
    if unknown:
        raise _fail(f"smdistributed has unknown key {unknown[0]!r}; allowed: dataparallel, "
                    f"modelparallel")
    return {name: _strategy_dict(part, f"smdistributed.{name}") for name, part in value.items()}


def _mp_parameters(modelparallel: Mapping[str, Any]) -> dict[str, Any] | None:
    """SMP's parameters, checked by the official SDK's own `get_mp_parameters`."""
    if not modelparallel.get("enabled"):
        return None
    fw_utils = official_sdk.module("fw_utils", "distribution smdistributed.modelparallel")
    try:
        return fw_utils.get_mp_parameters({"smdistributed": {"modelparallel": dict(modelparallel)}})
    except ValueError as error:
        raise _fail(f"smdistributed.modelparallel: {' '.join(str(error).split())}") from None


def _check_keys(distribution: Any) -> dict[str, Any]:
    if not isinstance(distribution, Mapping):
        raise _fail(f"must be a dict such as {_EXAMPLE}, got {type(distribution).__name__}")
    for key in distribution:
        if key in _OTHER_STRATEGIES:
            raise _fail(f"{key!r} is not supported by ddpjob; use one of "
                        f"{', '.join(STRATEGIES)}")
        if key not in (*STRATEGIES, "processes_per_host", "max_restarts"):
            raise _fail(f"unknown key {key!r}; allowed: {', '.join(STRATEGIES)}, "
                        f"processes_per_host, max_restarts")
    if "pytorchddp" in distribution and "smdistributed" in distribution:
        raise _fail("give pytorchddp or smdistributed, not both")
    parsed: dict[str, Any] = {}
    for name in STRATEGIES:
        if name in distribution:
            parsed[name] = (_smdistributed(distribution[name]) if name == "smdistributed"
                            else _strategy_dict(distribution[name], name))
    if "pytorchddp" in parsed:  # the official SDK sends pytorchddp as SMDDP
        parsed["smdistributed"] = {"dataparallel": parsed.pop("pytorchddp")}
    if parsed and set(parsed) not in _COMBINATIONS:
        raise _fail(f"give one strategy, not {' and '.join(distribution)}")
    return parsed


def _official(parsed: Mapping[str, Any], instance_type: str) -> dict[str, Any]:
    """What `_pytorch_distribution_configuration` sends for the (checked) strategies."""
    hps: dict[str, Any] = {}
    if "pytorchxla" in parsed:
        hps[PYTORCH_XLA] = parsed["pytorchxla"]["enabled"]
    if "mpi" in parsed:
        mpi = parsed["mpi"]
        hps[MPI] = mpi["enabled"]
        if mpi.get("processes_per_host"):
            hps[MPI_PROCESSES] = mpi["processes_per_host"]
        hps[MPI_OPTIONS] = mpi.get("custom_mpi_options", "")
    if "smdistributed" in parsed:
        smd = parsed["smdistributed"]
        mp = _mp_parameters(smd.get("modelparallel", {}))
        if mp:
            hps[MP_PARAMETERS] = mp
        data = smd.get("dataparallel", {})
        hps[SMDDP] = data.get("enabled", False)
        hps[INSTANCE_TYPE] = instance_type
        if data.get("enabled"):
            hps[SMDDP_MPI_OPTIONS] = data.get("custom_mpi_options", "")
    if parsed.get("torch_distributed", {}).get("enabled"):
        hps[TORCH_DISTRIBUTED] = True
        hps[INSTANCE_TYPE] = instance_type
    return hps


def _data_parallel(hps: Mapping[str, Any]) -> bool:
    return bool(hps.get(TORCH_DISTRIBUTED) or hps.get(SMDDP) or hps.get(PYTORCH_DDP))


def distribution_hyperparameters(distribution: Mapping[str, Any] | None, instance_type: str,
                                 *, dlc: bool = False) -> dict[str, Any]:
    """The hyperparameters (raw values) that select the launcher, or UserInputError."""
    if distribution is None:
        return {}
    parsed = _check_keys(distribution)
    if "pytorchxla" in parsed and not instance_type.startswith("ml."):
        raise _fail(f"'pytorchxla' (SageMaker Training Compiler) runs only on SageMaker "
                    f"(ml.* instance types), not on instance_type {instance_type!r}: use "
                    f"{_EXAMPLE} locally")
    hps = _official(parsed, instance_type)
    if dlc and _data_parallel(hps) and MP_PARAMETERS not in hps:
        hps = {TORCH_DISTRIBUTED: True, INSTANCE_TYPE: instance_type}
    if "processes_per_host" in distribution:
        per_host = _workers(distribution["processes_per_host"], "processes_per_host")
        if hps.get(MPI_PROCESSES, per_host) != per_host:
            raise _fail(f"processes_per_host {per_host} contradicts mpi's processes_per_host "
                        f"{hps[MPI_PROCESSES]}; give it once")
        if not (_data_parallel(hps) or hps.get(MPI)):  # workers need a launcher: torchrun
            hps = {TORCH_DISTRIBUTED: True, INSTANCE_TYPE: instance_type}
        hps[PROCESSES_PER_HOST] = per_host
    if "max_restarts" in distribution:
        restarts = _max_restarts(distribution["max_restarts"], hps)
        if restarts and dlc:
            raise _fail("max_restarts needs ddpjob's launcher (local jobs or the ddpjob image); "
                        "SageMaker's PyTorch container starts torchrun without restarts: remove "
                        "it, or pass image_uri=<the ddpjob image>")
        hps[MAX_RESTARTS] = restarts
    return hps


def _max_restarts(value: Any, hps: Mapping[str, Any]) -> int:
    """Worker restarts: 0..100, and only where torchrun runs the workers (it restarts them)."""
    if type(value) is not int or not 0 <= value <= MAX_RESTARTS_LIMIT:  # bool is not int here
        raise _fail(f"max_restarts must be an integer from 0 to {MAX_RESTARTS_LIMIT}, "
                    f"got {value!r}")
    if value and not _data_parallel(hps):
        raise _fail("max_restarts needs torchrun to restart the workers: add "
                    f"{_EXAMPLE[1:-1]} or processes_per_host")
    return value


def distribution_from_hyperparameters(decoded: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `distribution` dict that gives these (decoded) hyperparameters; for attach."""
    flags = (("torch_distributed", TORCH_DISTRIBUTED), ("pytorchddp", PYTORCH_DDP),
             ("pytorchxla", PYTORCH_XLA))
    result: dict[str, Any] = {name: {"enabled": True} for name, flag in flags
                              if decoded.get(flag) is True}
    smd: dict[str, Any] = {}
    if decoded.get(SMDDP) is True:
        smd["dataparallel"] = {"enabled": True}
        if decoded.get(SMDDP_MPI_OPTIONS):
            smd["dataparallel"]["custom_mpi_options"] = decoded[SMDDP_MPI_OPTIONS]
    if isinstance(decoded.get(MP_PARAMETERS), Mapping):
        smd["modelparallel"] = {"enabled": True, "parameters": dict(decoded[MP_PARAMETERS])}
    if smd:
        result["smdistributed"] = smd
    if decoded.get(MPI) is True:
        mpi: dict[str, Any] = {"enabled": True}
        if decoded.get(MPI_PROCESSES):
            mpi["processes_per_host"] = decoded[MPI_PROCESSES]
        if decoded.get(MPI_OPTIONS):
            mpi["custom_mpi_options"] = decoded[MPI_OPTIONS]
        result["mpi"] = mpi
    if decoded.get(PROCESSES_PER_HOST):
        result["processes_per_host"] = decoded[PROCESSES_PER_HOST]
    if MAX_RESTARTS in decoded:
        result["max_restarts"] = decoded[MAX_RESTARTS]
    return result or None


#: Every hyperparameter name this module may set (attach separates them from the user's).
NAMES = frozenset({TORCH_DISTRIBUTED, PYTORCH_DDP, PYTORCH_XLA, SMDDP, SMDDP_MPI_OPTIONS, MPI,
                   MPI_PROCESSES, MPI_OPTIONS, MP_PARAMETERS, INSTANCE_TYPE, PROCESSES_PER_HOST,
                   MAX_RESTARTS})
