"""Warm start from local parent tuning jobs (`WarmStartConfig`): AWS's checks on the parents,
the parents' trials that seed the new job's search, and `OverallBestTrainingJob`.

AWS's rules (automatic-model-tuning-warm-start, for both types): at most 5 parents
(botocore's model, checked with the request's shape), each in a terminal state (Completed,
Stopped or Failed); the same objective metric; the same set of static plus tunable
hyperparameter names ("The set of tunable plus static HyperParameter names is not the same
across current and parent tuning jobs"); a hyperparameter tuned in both keeps its type.
IdenticalDataAndAlgorithm also keeps "the same input data and training image".

Ours where AWS is silent: a parent must be a tuning job of this local home (a cloud parent is
refused); the Grid strategy does not warm start (its grid is fixed by its ranges); with
IdenticalDataAndAlgorithm a hyperparameter static in both keeps its value, except the
platform's own (`sagemaker_*`, `ddpjob_*`: the code's location changes with every upload), and
the objective's type is the parents' too; AWS's limit of 10 changes between tunable and static
values is not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ddpjob_runtime.shared.hyperparameters import is_reserved

from ddpjob.local.tuning import answers
from ddpjob.local.tuning.tuningstate import Trial, TuningState
from ddpjob.tuning.rules import CONFIG, DEFINITION, RuleBroken
from ddpjob.tuning.strategies import KnownTrial, range_entries

MEMBER = "WarmStartConfig"
#: A parent tuning job: its request and its state as readers see it.
Parent = tuple[dict[str, Any], TuningState]
_KINDS = {"Integer": "an integer", "Continuous": "a continuous", "Categorical": "a categorical"}


def parent_names(request: Mapping[str, Any]) -> list[str]:
    """The names of the request's parent tuning jobs (none without a warm start)."""
    config = request.get(MEMBER) or {}
    return [p["HyperParameterTuningJobName"] for p in config.get(
        "ParentHyperParameterTuningJobs") or ()]


def _names(request: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(tuned name -> its kind, static name -> its value) of a request."""
    tuned = {name: kind for name, kind, _ in range_entries(
        request[CONFIG].get("ParameterRanges") or {})}
    return tuned, dict(request[DEFINITION].get("StaticHyperParameters") or {})


def check(request: Mapping[str, Any], parent: Callable[[str], Parent | None]) -> None:
    """RuleBroken, naming the member, when a warm start's parents break AWS's rules (or ours);
    `parent(name)` reads a local parent."""
    names = parent_names(request)
    if not names:
        return
    member = f"{MEMBER}.ParentHyperParameterTuningJobs"  # at most 5: botocore's model
    if request[CONFIG]["Strategy"] == "Grid":
        raise RuleBroken(f"{CONFIG}.Strategy", "the Grid strategy does not warm start: its "
                                               "grid is its ranges' (docs/tuning.md)")
    for index, name in enumerate(names):
        found = parent(name)
        if found is None:
            raise RuleBroken(f"{member}[{index}]",
                             f"no local tuning job named {name!r}: a local tuning job warm "
                             f"starts from tuning jobs of its local home only")
        if not found[1].is_terminal:
            raise RuleBroken(f"{member}[{index}]",
                             f"the parent tuning job {name} is {found[1].status.value}: a warm "
                             f"start's parents must have ended (Completed, Stopped or Failed)")
        _check_like(request, found[0], name)


def _check_like(request: Mapping[str, Any], parent: Mapping[str, Any], name: str) -> None:
    """The request keeps what its parent `name` fixes."""
    identical = request[MEMBER]["WarmStartType"] == "IdenticalDataAndAlgorithm"
    objective, theirs = answers.objective(request), answers.objective(parent)  # type: ignore[arg-type]
    fixed = ("MetricName", "Type") if identical else ("MetricName",)
    if any(objective[key] != theirs[key] for key in fixed):
        raise RuleBroken(f"{CONFIG}.HyperParameterTuningJobObjective",
                         f"a warm start keeps its parents' objective: the parent tuning job "
                         f"{name}'s is {theirs}, got {objective}")
    tuned, static = _names(request)
    parent_tuned, parent_static = _names(parent)
    ours, parents = set(tuned) | set(static), set(parent_tuned) | set(parent_static)
    if ours != parents:
        raise RuleBroken(f"{DEFINITION}.StaticHyperParameters",
                         f"The set of tunable plus static HyperParameter names is not the same "
                         f"across current and parent tuning jobs (parent {name}: "
                         f"{_difference(ours, parents)})")
    for key, kind in tuned.items():
        if parent_tuned.get(key, kind) != kind:
            raise RuleBroken(f"{CONFIG}.ParameterRanges",
                             f"{key} was {_KINDS[parent_tuned[key]]} range in the parent tuning "
                             f"job {name} and is {_KINDS[kind]} one here: a warm start keeps "
                             f"each hyperparameter's type")
    if identical:
        _check_identical(request[DEFINITION], parent[DEFINITION], static, parent_static, name)


def _check_identical(definition: Mapping[str, Any], parent: Mapping[str, Any],
                     static: Mapping[str, str], parent_static: Mapping[str, str],
                     name: str) -> None:
    image = (definition["AlgorithmSpecification"].get("TrainingImage"),
             parent["AlgorithmSpecification"].get("TrainingImage"))
    if image[0] != image[1]:
        raise RuleBroken(f"{DEFINITION}.AlgorithmSpecification.TrainingImage",
                         f"IdenticalDataAndAlgorithm keeps the parent tuning job {name}'s "
                         f"training image {image[1]!r}, got {image[0]!r} (TransferLearning "
                         f"may change it)")
    if definition.get("InputDataConfig") != parent.get("InputDataConfig"):
        raise RuleBroken(f"{DEFINITION}.InputDataConfig",
                         f"IdenticalDataAndAlgorithm keeps the parent tuning job {name}'s input "
                         f"data, and the channels differ (TransferLearning may change them)")
    changed = sorted(key for key in set(static) & set(parent_static)
                     if static[key] != parent_static[key] and not is_reserved(key))
    if changed:
        raise RuleBroken(f"{DEFINITION}.StaticHyperParameters",
                         f"IdenticalDataAndAlgorithm keeps the parent tuning job {name}'s static "
                         f"values, and {', '.join(changed)} changed (TransferLearning may "
                         f"change them)")


def _difference(ours: set[str], parents: set[str]) -> str:
    parts = [f"new here: {', '.join(sorted(ours - parents))}" if ours - parents else "",
             f"gone here: {', '.join(sorted(parents - ours))}" if parents - ours else ""]
    return "; ".join(part for part in parts if part)


def known_trials(parents: list[Parent]) -> list[KnownTrial]:
    """The parents' trials that succeeded: what seeds the new job's search."""
    return [KnownTrial(dict(t.values), t.objective) for _, state in parents
            for t in state.succeeded() if t.objective is not None]


def overall_best(request: dict[str, Any], state: TuningState, parents: list[Parent]
                 ) -> dict[str, Any]:
    """`OverallBestTrainingJob` (IdenticalDataAndAlgorithm only): the best trial of this job
    and its parents, as a training job summary of its own tuning job."""
    if (request.get(MEMBER) or {}).get("WarmStartType") != "IdenticalDataAndAlgorithm":
        return {}
    sign = 1 if answers.objective(request)["Type"] == "Maximize" else -1
    candidates: list[tuple[dict[str, Any], Trial]] = [
        (job_request, trial) for job_request, job_state in [(request, state), *parents]
        for trial in job_state.succeeded() if trial.objective is not None]
    if not candidates:
        return {}
    job_request, trial = max(candidates, key=lambda c: sign * c[1].objective)  # type: ignore[operator]
    return {"OverallBestTrainingJob": answers.trial_summary(job_request, trial)}
