"""Warm start from local parents: AWS's checks, each one line naming the member; the parents'
trials that seed the search; OverallBestTrainingJob (pure)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from ddpjob.local.tuning import warm_start
from ddpjob.local.tuning.tuningstate import Trial, TuningState, TuningStatus
from ddpjob.tuning.rules import RuleBroken

RANGES = {"ContinuousParameterRanges": [{"Name": "level", "MinValue": "0", "MaxValue": "6"}]}


def _request(name: str, warm: str | None = None, parents: tuple[str, ...] = ("parent",),
             ) -> dict[str, Any]:
    request: dict[str, Any] = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Bayesian", "ParameterRanges": copy.deepcopy(RANGES),
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"}},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": "ddpjob-local"},
            "StaticHyperParameters": {"epochs": "2", "sagemaker_submit_directory": f"/{name}"}}}
    if warm:
        request["WarmStartConfig"] = {"WarmStartType": warm, "ParentHyperParameterTuningJobs": [
            {"HyperParameterTuningJobName": p} for p in parents]}
    return request


def _state(name: str, status: TuningStatus, *objectives: float) -> TuningState:
    state = TuningState.new(name, now=0.0)
    state.status = status
    state.trials = [Trial(f"{name}-{n:03d}", {"level": str(v)}, "Completed", objective=v)
                    for n, v in enumerate(objectives)]
    return state


PARENT = (_request("parent"), _state("parent", TuningStatus.COMPLETED, 4.0, 1.0))


def _found(**parents: warm_start.Parent) -> Callable[[str], warm_start.Parent | None]:
    return lambda name: parents.get(name)


def test_a_warm_start_like_its_parent_is_accepted() -> None:
    for kind in ("IdenticalDataAndAlgorithm", "TransferLearning"):
        warm_start.check(_request("child", kind), _found(parent=PARENT))
    warm_start.check(_request("child"), _found())  # no warm start: nothing to check


def _change(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(request: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        target = request
        for key in keys:
            target = target[key]
        target[last] = value
    return change


CONFIG, DEFINITION = "HyperParameterTuningJobConfig", "TrainingJobDefinition"


@pytest.mark.parametrize(("kind", "change", "member", "words"), [
    ("TransferLearning", _change(f"{CONFIG}.HyperParameterTuningJobObjective.MetricName", "acc"),
     f"{CONFIG}.HyperParameterTuningJobObjective", "keeps its parents' objective"),
    ("TransferLearning", _change(f"{DEFINITION}.StaticHyperParameters.dropout", "0.1"),
     f"{DEFINITION}.StaticHyperParameters",
     "The set of tunable plus static HyperParameter names is not the same"),
    ("IdenticalDataAndAlgorithm", _change(f"{CONFIG}.ParameterRanges", {
        "IntegerParameterRanges": [{"Name": "level", "MinValue": "0", "MaxValue": "6"}]}),
     f"{CONFIG}.ParameterRanges", "keeps each hyperparameter's type"),
    ("IdenticalDataAndAlgorithm",
     _change(f"{DEFINITION}.AlgorithmSpecification.TrainingImage", "other:1"),
     f"{DEFINITION}.AlgorithmSpecification.TrainingImage", "training image"),
    ("IdenticalDataAndAlgorithm", _change(f"{DEFINITION}.StaticHyperParameters.epochs", "3"),
     f"{DEFINITION}.StaticHyperParameters", "epochs changed"),
    ("IdenticalDataAndAlgorithm", _change(f"{DEFINITION}.InputDataConfig", [
        {"ChannelName": "train"}]), f"{DEFINITION}.InputDataConfig", "input data"),
    ("IdenticalDataAndAlgorithm", _change(f"{CONFIG}.Strategy", "Grid"), f"{CONFIG}.Strategy",
     "does not warm start"),
])
def test_what_a_warm_start_must_keep_is_one_line_naming_the_member(
        kind: str, change: Callable[[dict[str, Any]], None], member: str, words: str) -> None:
    request = _request("child", kind)
    change(request)
    with pytest.raises(RuleBroken, match=words) as refused:
        warm_start.check(request, _found(parent=PARENT))
    assert refused.value.member == member and "\n" not in str(refused.value)


def test_transfer_learning_may_change_the_image_data_and_static_values() -> None:
    request = _request("child", "TransferLearning")
    request[DEFINITION]["AlgorithmSpecification"]["TrainingImage"] = "other:2"
    request[DEFINITION]["StaticHyperParameters"]["epochs"] = "5"
    request[DEFINITION]["InputDataConfig"] = [{"ChannelName": "train"}]
    warm_start.check(request, _found(parent=PARENT))


def test_a_parent_that_is_not_here_or_still_runs_is_refused_by_its_index() -> None:
    running = (_request("busy"), _state("busy", TuningStatus.IN_PROGRESS))
    request = _request("child", "TransferLearning", parents=("parent", "busy"))
    with pytest.raises(RuleBroken, match="busy is InProgress: a warm start's parents must") as e:
        warm_start.check(request, _found(parent=PARENT, busy=running))
    assert e.value.member == "WarmStartConfig.ParentHyperParameterTuningJobs[1]"
    with pytest.raises(RuleBroken, match="no local tuning job named 'busy'"):
        warm_start.check(request, _found(parent=PARENT))


def test_the_parents_trials_seed_the_search_and_the_overall_best_spans_them() -> None:
    known = warm_start.known_trials([PARENT])
    assert [(t.values, t.objective) for t in known] == [({"level": "4.0"}, 4.0),
                                                        ({"level": "1.0"}, 1.0)]
    child = _request("child", "IdenticalDataAndAlgorithm")
    state = _state("child", TuningStatus.COMPLETED, 2.0)
    best = warm_start.overall_best(child, state, [PARENT])["OverallBestTrainingJob"]
    assert (best["TrainingJobName"], best["TuningJobName"]) == ("parent-001", "parent")
    assert warm_start.overall_best(_request("child", "TransferLearning"), state, [PARENT]) == {}
