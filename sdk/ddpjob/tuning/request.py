"""The CreateHyperParameterTuningJob request, built from the CreateTrainingJob request the
estimator's plan makes, and checked: botocore's model (its minima and types as boto3 checks,
then its maxima, which botocore leaves to the service), then AWS's rules (`rules`).

The trial definition carries every member of the plain job's request that
`HyperParameterTrainingJobDefinition` has (channels, environment, checkpoint, retry strategy,
spot and MaxWait, output, VPC, resources), its hyperparameters minus the tuned ones as
`StaticHyperParameters`, and its tags go to the tuning job. A member the definition cannot
carry is left out; the tuner names each in one warning (`parity`; the official SDKs drop them
silently).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddpjob import request as training_request
from ddpjob.errors import UserInputError
from ddpjob.tuning import rules

if TYPE_CHECKING:  # pragma: no cover
    from botocore.model import Shape

OPERATION = "CreateHyperParameterTuningJob"
DEFINITION_SHAPE = "HyperParameterTrainingJobDefinition"
#: Members of the training request the definition holds otherwise (or the tuning job does).
_MOVED = ("TrainingJobName", "HyperParameters", "Tags", "AlgorithmSpecification")


@dataclass(frozen=True)
class TuningConfig:
    """The tuner's checked arguments, as HyperParameterTuningJobConfig members."""

    strategy: str
    objective_type: str
    objective_metric_name: str
    parameter_ranges: Mapping[str, Any]
    max_parallel_jobs: int
    max_jobs: int | None = None
    max_runtime_in_seconds: int | None = None
    early_stopping_type: str = "Off"
    random_seed: int | None = None
    strategy_config: Mapping[str, Any] | None = None
    completion_criteria: Mapping[str, Any] | None = None
    metric_definitions: tuple[Mapping[str, str], ...] | None = None  # None: the estimator's
    warm_start: Mapping[str, Any] | None = None
    tags: tuple[Mapping[str, str], ...] = field(default_factory=tuple)

    def member(self) -> dict[str, Any]:
        """HyperParameterTuningJobConfig."""
        limits: dict[str, Any] = {"MaxParallelTrainingJobs": self.max_parallel_jobs}
        if self.max_jobs is not None:
            limits["MaxNumberOfTrainingJobs"] = self.max_jobs
        if self.max_runtime_in_seconds is not None:
            limits["MaxRuntimeInSeconds"] = self.max_runtime_in_seconds
        config: dict[str, Any] = {
            "Strategy": self.strategy, "ResourceLimits": limits,
            "TrainingJobEarlyStoppingType": self.early_stopping_type,
            "HyperParameterTuningJobObjective": {"Type": self.objective_type,
                                                 "MetricName": self.objective_metric_name},
            "ParameterRanges": dict(self.parameter_ranges)}
        optional = {"RandomSeed": self.random_seed, "StrategyConfig": self.strategy_config,
                    "TuningJobCompletionCriteria": self.completion_criteria}
        config.update({key: value for key, value in optional.items() if value is not None})
        return config


@functools.lru_cache(maxsize=1)
def _carried() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training request members the definition carries as they are, its algorithm members)."""
    model = training_request.service_model()
    definition = model.shape_for(DEFINITION_SHAPE)
    training = model.operation_model(training_request.OPERATION).input_shape
    carried = tuple(name for name in training.members
                    if name in definition.members and name not in _MOVED)
    return carried, tuple(definition.members["AlgorithmSpecification"].members)


def tuned_names(parameter_ranges: Mapping[str, Any]) -> set[str]:
    """The names of every range in a ParameterRanges member."""
    return {entry["Name"] for entries in parameter_ranges.values() for entry in entries or ()}


def training_job_definition(training: Mapping[str, Any], config: TuningConfig
                            ) -> dict[str, Any]:
    """The TrainingJobDefinition of a planned CreateTrainingJob request."""
    carried, algorithm_members = _carried()
    algorithm = dict(training["AlgorithmSpecification"])
    if "ContainerEntrypoint" in algorithm:
        raise UserInputError(
            "a tuning job cannot run an image's ContainerEntrypoint: the tuning API has no "
            "such member (aws/sagemaker-python-sdk#5184); use a framework image and entry_point")
    if config.metric_definitions is not None:
        algorithm["MetricDefinitions"] = [dict(metric) for metric in config.metric_definitions]
    tuned = tuned_names(config.parameter_ranges)
    definition: dict[str, Any] = {
        name: training[name] for name in carried if name in training}
    definition["AlgorithmSpecification"] = {name: value for name, value in algorithm.items()
                                            if name in algorithm_members}
    definition["StaticHyperParameters"] = {name: value for name, value
                                           in (training.get("HyperParameters") or {}).items()
                                           if name not in tuned}
    return definition


def tuning_request(name: str, training: Mapping[str, Any], config: TuningConfig
                   ) -> dict[str, Any]:
    """The CreateHyperParameterTuningJob request (not yet checked: `validate_tuning_request`)."""
    request: dict[str, Any] = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": config.member(),
        "TrainingJobDefinition": training_job_definition(training, config)}
    tags = [dict(tag) for tag in training.get("Tags") or ()]
    tags += [dict(tag) for tag in config.tags if dict(tag) not in tags]
    if tags:
        request["Tags"] = tags
    if config.warm_start is not None:
        request["WarmStartConfig"] = dict(config.warm_start)
    return request


def _over_maximum(shape: Shape, value: Any, path: str) -> str | None:
    """The first member of `value` above a `max` of botocore's model (lengths, counts, numbers),
    which botocore does not check; None when there is none."""
    limit = shape.metadata.get("max")
    kind = shape.type_name
    if kind in ("string", "list", "map") and limit is not None and len(value) > limit:
        return f"{path} has {len(value)} {'characters' if kind == 'string' else 'entries'}, " \
               f"at most {limit} allowed"
    if kind in ("integer", "long", "float", "double") and limit is not None and value > limit:
        return f"{path} is {value}, at most {limit} allowed"
    children: list[tuple[Shape, Any, str]] = []
    if kind == "structure":
        children = [(shape.members[key], item, f"{path}.{key}") for key, item in value.items()
                    if key in shape.members]
    elif kind == "list":
        children = [(shape.member, item, f"{path}[{index}]") for index, item in enumerate(value)]
    elif kind == "map":
        children = [(shape.value, item, f"{path}[{key!r}]") for key, item in value.items()]
    return next((found for child in children if (found := _over_maximum(*child))), None)


def validate_tuning_request(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """`request` when botocore's model and AWS's rules accept it; else one-line UserInputError
    (a `rules.RuleBroken` names the member)."""
    training_request.validate_request(request, OPERATION)
    shape = training_request.service_model().operation_model(OPERATION).input_shape
    problem = _over_maximum(shape, request, OPERATION)
    if problem:
        raise UserInputError(f"invalid {OPERATION} request, nothing was sent: {problem}")
    return rules.check_request(request)
