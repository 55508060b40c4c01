"""`HyperparameterTuner.attach`: the tuner's arguments read back from a
DescribeHyperParameterTuningJob response (the official SDK v2's
`_prepare_init_params_from_job_description`), its estimator rebuilt from the training job
definition as `Estimator.attach` rebuilds one from a training job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared import contract

from ddpjob import arguments, backends
from ddpjob.errors import UserInputError
from ddpjob.tuning import parameters, rules

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.base_session import BaseSession
    from ddpjob.estimator import Estimator


def _as_given(values: list[str]) -> list[Any]:
    """Categorical values as the user gave them (a framework's request JSON-quotes them)."""
    try:
        return [json.loads(value) for value in values]
    except ValueError:
        return values


def _ranges(config: Mapping[str, Any]) -> dict[str, parameters.AnyRange]:
    ranges = rules.ranges_of(config.get("ParameterRanges") or {})
    return {name: parameters.CategoricalParameter(_as_given(found.values))
            if isinstance(found, parameters.CategoricalParameter) else found
            for name, found in ranges.items()}


def tuner_arguments(described: Mapping[str, Any], session: BaseSession,
                    estimator_cls: type[Estimator] | None) -> dict[str, Any]:
    """The `HyperparameterTuner` arguments that rebuild the tuner of `described`."""
    definition = described.get("TrainingJobDefinition")
    if definition is None:
        raise UserInputError(f"attach: tuning job {described['HyperParameterTuningJobName']} "
                             f"has several training job definitions; ddpjob's tuner takes one")
    if estimator_cls is None:
        from ddpjob.pytorch import PyTorch as estimator_cls
    static = {name: value for name, value in (definition.get("StaticHyperParameters") or {})
              .items() if name != contract.TUNING_OBJECTIVE}  # the service adds it
    as_training_job = {**definition, "HyperParameters": static}
    estimator = estimator_cls(session=session, **arguments.from_description(
        as_training_job, backends.LOCAL.default_image))
    config = described["HyperParameterTuningJobConfig"]
    objective = config.get("HyperParameterTuningJobObjective") or {}
    limits = config["ResourceLimits"]
    return {
        "estimator": estimator, "objective_metric_name": objective.get("MetricName"),
        "hyperparameter_ranges": _ranges(config),
        "metric_definitions": definition["AlgorithmSpecification"].get("MetricDefinitions"),
        "strategy": config["Strategy"], "objective_type": objective.get("Type", "Maximize"),
        "max_jobs": limits.get("MaxNumberOfTrainingJobs"),
        "max_parallel_jobs": limits["MaxParallelTrainingJobs"],
        "max_runtime_in_seconds": limits.get("MaxRuntimeInSeconds"),
        "early_stopping_type": config.get("TrainingJobEarlyStoppingType", "Off"),
        "random_seed": config.get("RandomSeed"), "strategy_config": config.get("StrategyConfig"),
        "completion_criteria_config": config.get("TuningJobCompletionCriteria"),
        "warm_start_config": described.get("WarmStartConfig")}
