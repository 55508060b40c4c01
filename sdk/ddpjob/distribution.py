"""The estimator's `distribution` dict -> the `sagemaker_*` hyperparameters the official SDK sends.

A pure function: `distribution_hyperparameters(distribution, instance_type)` checks the dict
strictly and returns raw (not yet JSON-encoded) values. Accepted forms, on any instance type:

    {"torch_distributed": {"enabled": True}}
    {"pytorchddp": {"enabled": True}}
    {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": ""}}}
    {"torch_distributed": {"enabled": True},
     "smdistributed": {"dataparallel": {"enabled": True}}}        # the official SDK's p5 form
    {"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": ""}}

plus ddpjob's top-level `"processes_per_host": N` (workers per host, e.g. CPU workers), which
becomes `ddpjob_processes_per_host` and, with no strategy enabled, implies torch_distributed,
and `"max_restarts": N` (0..100, default 0: worker restarts, torchrun's `--max_restarts`), which
becomes `ddpjob_max_restarts`.
A strategy given with `"enabled": False` (and nothing else) sends what the official SDK sends
for it (its flag false, or nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.contract import (  # the hyperparameter names, spelled once
    INSTANCE_TYPE,
    MAX_RESTARTS,
    MAX_RESTARTS_LIMIT,
    MPI,
    MPI_OPTIONS,
    MPI_PROCESSES,
    PROCESSES_PER_HOST,
    PYTORCH_DDP,
    SMDDP,
    SMDDP_MPI_OPTIONS,
    TORCH_DISTRIBUTED,
)

from ddpjob.errors import UserInputError

STRATEGIES = ("torch_distributed", "pytorchddp", "smdistributed", "mpi")
# Strategy -> the keys its dict may hold.
_KEYS = {
    "torch_distributed": ("enabled",),
    "pytorchddp": ("enabled",),
    "mpi": ("enabled", "processes_per_host", "custom_mpi_options"),
    "smdistributed.dataparallel": ("enabled", "custom_mpi_options"),
}
# Official SDK strategies for other frameworks or libraries: named, so the error can say why.
_OTHER_STRATEGIES = ("parameter_server", "multi_worker_mirrored_strategy", "pytorchxla",
                     "instance_groups", "modelparallel")
_EXAMPLE = '{"torch_distributed": {"enabled": True}}'


def _fail(message: str) -> UserInputError:
    return UserInputError(f"distribution: {message}")


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(f"{where} must be an integer >= 1, got {value!r}")
    return value


def _strategy_dict(value: Any, where: str) -> dict[str, Any]:
    """The strategy's dict, its keys and `enabled` checked."""
    if not isinstance(value, Mapping):
        raise _fail(f"{where} must be a dict such as {{'enabled': True}}, got {value!r}")
    allowed = _KEYS[where]
    unknown = sorted(set(value) - set(allowed), key=str)
    if unknown:
        raise _fail(f"{where} has unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}")
    if "enabled" not in value:
        raise _fail(f"{where} needs 'enabled': True")
    if not isinstance(value["enabled"], bool):
        raise _fail(f"{where}['enabled'] must be True or False, got {value['enabled']!r}")
    if not value["enabled"] and len(value) > 1:
        others = ", ".join(sorted(k for k in value if k != "enabled"))
        raise _fail(f"{where} is disabled ('enabled': False) but sets {others}; "
                    f"enable it or remove them")
    options = value.get("custom_mpi_options", "")
    if not isinstance(options, str):
        raise _fail(f"{where}['custom_mpi_options'] must be a string, got {options!r}")
    if "processes_per_host" in value:
        _positive_int(value["processes_per_host"], f"{where}['processes_per_host']")
    return dict(value)


def _smdistributed(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(f"smdistributed must be a dict such as {{'dataparallel': {{'enabled': True}}}},"
                    f" got {value!r}")
    if "modelparallel" in value:
        raise _fail("smdistributed modelparallel is not supported by ddpjob; "
                    "use smdistributed dataparallel or torch_distributed")
    unknown = sorted(set(value) - {"dataparallel"}, key=str)
    if unknown or "dataparallel" not in value:
        name = unknown[0] if unknown else None
        raise _fail("smdistributed needs exactly the key 'dataparallel'"
                    + (f", not {name!r}" if name is not None else ""))
    return _strategy_dict(value["dataparallel"], "smdistributed.dataparallel")


def distribution_hyperparameters(
    distribution: Mapping[str, Any] | None, instance_type: str
) -> dict[str, Any]:
    """The hyperparameters (raw values) that select the launcher, or UserInputError."""
    if distribution is None:
        return {}
    if not isinstance(distribution, Mapping):
        raise _fail(f"must be a dict such as {_EXAMPLE}, got {type(distribution).__name__}")
    for key in distribution:
        if key in _OTHER_STRATEGIES:
            raise _fail(f"{key!r} is not supported by ddpjob; use one of "
                        f"{', '.join(STRATEGIES)}")
        if key not in (*STRATEGIES, "processes_per_host", "max_restarts"):
            raise _fail(f"unknown key {key!r}; allowed: {', '.join(STRATEGIES)}, "
                        f"processes_per_host, max_restarts")

    given = {name: distribution[name] for name in STRATEGIES if name in distribution}
    parsed = {
        name: _smdistributed(value) if name == "smdistributed" else _strategy_dict(value, name)
        for name, value in given.items()
    }
    enabled = [name for name, value in parsed.items() if value["enabled"]]
    p5_form = set(given) == {"torch_distributed", "smdistributed"}
    if len(given) > 1 and not p5_form:
        raise _fail(f"give one strategy, not {' and '.join(given)}")

    hps: dict[str, Any] = {}
    if p5_form:
        if not all(parsed[name]["enabled"] for name in given):
            raise _fail("torch_distributed with smdistributed needs both enabled")
        hps.update(_smddp(parsed["smdistributed"], instance_type))
        hps[TORCH_DISTRIBUTED] = True
        hps[INSTANCE_TYPE] = instance_type
    elif "torch_distributed" in parsed and enabled:
        hps = {TORCH_DISTRIBUTED: True, INSTANCE_TYPE: instance_type}
    elif "pytorchddp" in parsed and enabled:
        hps = {PYTORCH_DDP: True, INSTANCE_TYPE: instance_type}
    elif "smdistributed" in parsed:
        hps = _smddp(parsed["smdistributed"], instance_type)
    elif "mpi" in parsed:
        mpi = parsed["mpi"]
        hps[MPI] = mpi["enabled"]
        if mpi.get("processes_per_host"):
            hps[MPI_PROCESSES] = mpi["processes_per_host"]
        hps[MPI_OPTIONS] = mpi.get("custom_mpi_options", "")

    if "processes_per_host" in distribution:
        per_host = _positive_int(distribution["processes_per_host"], "processes_per_host")
        if MPI_PROCESSES in hps and hps[MPI_PROCESSES] != per_host:
            raise _fail(f"processes_per_host {per_host} contradicts mpi's processes_per_host "
                        f"{hps[MPI_PROCESSES]}; give it once")
        if not enabled:  # workers per host need a launcher: torchrun
            hps = {TORCH_DISTRIBUTED: True, INSTANCE_TYPE: instance_type}
        hps[PROCESSES_PER_HOST] = per_host
    if "max_restarts" in distribution:
        hps[MAX_RESTARTS] = _max_restarts(distribution["max_restarts"], hps)
    return hps


def _max_restarts(value: Any, hps: dict[str, Any]) -> int:
    """Worker restarts: 0..100, and only where torchrun runs the workers (it restarts them)."""
    if type(value) is not int or not 0 <= value <= MAX_RESTARTS_LIMIT:  # bool is not int here
        raise _fail(f"max_restarts must be an integer from 0 to {MAX_RESTARTS_LIMIT}, "
                    f"got {value!r}")
    if value and not any(hps.get(flag) is True for flag in (TORCH_DISTRIBUTED, PYTORCH_DDP, SMDDP)):
        raise _fail("max_restarts needs torchrun to restart the workers: add "
                    f"{_EXAMPLE[1:-1]} or processes_per_host")
    return value


def _smddp(dataparallel: dict[str, Any], instance_type: str) -> dict[str, Any]:
    hps: dict[str, Any] = {SMDDP: dataparallel["enabled"], INSTANCE_TYPE: instance_type}
    if dataparallel["enabled"]:
        hps[SMDDP_MPI_OPTIONS] = dataparallel.get("custom_mpi_options", "")
    return hps
