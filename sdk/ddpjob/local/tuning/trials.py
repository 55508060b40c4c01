"""A tuning job's trials as CreateTrainingJob requests: the definition, the tuned values, the
static hyperparameters and the service's `_tuning_objective_metric` (pure).

Each trial then runs through the local control plane like any training job, so spot,
checkpoints, retries, warm pools, `ddpjob interrupt` and `ddpjob stacks` work on it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.shared import contract

# The definition's members that a CreateTrainingJob request takes as they are.
_CARRIED = ("RoleArn", "InputDataConfig", "OutputDataConfig", "VpcConfig", "StoppingCondition",
            "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption",
            "EnableManagedSpotTraining", "CheckpointConfig", "RetryStrategy", "Environment")
_ALGORITHM = ("TrainingImage", "AlgorithmName", "TrainingInputMode", "MetricDefinitions")


def trial_name(tuning_job: str, number: int) -> str:
    """`<tuning job>-<NNN>-<8 hex>`, as SageMaker names a tuning job's training jobs."""
    return f"{tuning_job}-{number:03d}-{secrets.token_hex(4)}"


def _json_encoded(static: Mapping[str, str]) -> bool:
    """Whether the definition's client JSON-encodes its values (a framework estimator's, whose
    `_tuning_objective_metric` SageMaker then quotes too)."""
    try:
        return any(isinstance(json.loads(v), str) for v in static.values())
    except (TypeError, ValueError):
        return False


def objective_hyperparameter(static: Mapping[str, str], objective: str) -> dict[str, str]:
    """The service's `_tuning_objective_metric`, which it adds to the definition's static
    hyperparameters and so to every trial's."""
    return {contract.TUNING_OBJECTIVE: json.dumps(objective) if _json_encoded(static)
            else objective}


def trial_request(definition: Mapping[str, Any], name: str, values: Mapping[str, str],
                  objective: str) -> dict[str, Any]:
    """The CreateTrainingJob request of trial `name` with the tuned `values`, whose tuning
    job's objective metric is `objective`."""
    static = dict(definition.get("StaticHyperParameters") or {})
    algorithm = definition["AlgorithmSpecification"]
    request = {key: definition[key] for key in _CARRIED if key in definition}
    request.update(
        TrainingJobName=name,
        AlgorithmSpecification={k: algorithm[k] for k in _ALGORITHM if k in algorithm},
        ResourceConfig=resources(definition),
        HyperParameters={**static, **values, **objective_hyperparameter(static, objective)},
    )
    return request


def resources(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition's ResourceConfig, or its `HyperParameterTuningResourceConfig` as one."""
    return definition.get("ResourceConfig") or _resources(
        definition["HyperParameterTuningResourceConfig"])


def _resources(config: Mapping[str, Any]) -> dict[str, Any]:
    """`HyperParameterTuningResourceConfig` (v2's) as a training job's ResourceConfig: its type
    and count, or its first `InstanceConfigs` entry (the Prioritized allocation's first)."""
    first = (config.get("InstanceConfigs") or [config])[0]
    keys = ("InstanceType", "InstanceCount", "VolumeSizeInGB")
    resources = {k: first[k] for k in keys if k in first}
    if "VolumeKmsKeyId" in config:
        resources["VolumeKmsKeyId"] = config["VolumeKmsKeyId"]
    return resources


def objective_value(described: Mapping[str, Any], metric: str) -> float | None:
    """The trial's final value of the objective metric (FinalMetricDataList), None without."""
    for entry in described.get("FinalMetricDataList") or []:
        if entry.get("MetricName") == metric:
            return float(entry["Value"])
    return None
