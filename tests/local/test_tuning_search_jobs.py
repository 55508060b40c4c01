"""Local tuning jobs' Bayesian and Hyperband strategies, completion criteria and warm start, on
real trials of the torch-free script of `test_tuning_jobs` (one trial at a time, few trials:
what each strategy decides then depends only on the seed and the told objectives)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.session import LocalSession
from ddpjob.tuning import searches

from tests.local.conftest import assert_no_processes
from tests.local.test_tuning_jobs import _valid, tuning_request, wait_tuning

CONFIG = "HyperParameterTuningJobConfig"


def _trials(session: LocalSession, name: str) -> list[dict[str, Any]]:
    """The tuning job's trial summaries, in the order they were created."""
    return session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=name, SortBy="Name", SortOrder="Ascending",
        MaxResults=100)["TrainingJobSummaries"]


def _loss(trial: dict[str, Any]) -> float:
    return (float(trial["TunedHyperParameters"]["level"]) - 3) ** 2


def test_a_bayesian_job_is_seeded_and_follows_the_objectives_its_trials_reported(
        session: LocalSession, tmp_path: Path) -> None:
    """The trials' values are those of the same seeded search told the same objectives in the
    same order: past its random start, what it tries next depends on what it was told."""
    request = tuning_request(session, tmp_path, "bayes", strategy="Bayesian", jobs=4,
                             parallel=1)
    session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    described = wait_tuning(session, "bayes")
    _valid("DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    trials = _trials(session, "bayes")
    replay = searches.for_request(request[CONFIG], {}, "bayes")
    for trial in trials:
        assert replay.suggest(trial["TrainingJobName"]) == trial["TunedHyperParameters"]
        replay.tell(trial["TrainingJobName"],
                    trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])
    assert len(trials) == 4
    assert_no_processes(session.home)


def test_hyperband_stops_a_trial_worse_than_the_best_at_its_rung(
        session: LocalSession, tmp_path: Path) -> None:
    """Three epochs a trial, one a second: MaxResource 3 from the static epochs, MinResource 1,
    reduction factor 3, so rungs at epochs 1 and 3. The seed's second trial is worse than the
    first at epoch 1 in the same bracket, and is stopped there."""
    request = tuning_request(session, tmp_path, "band", strategy="Hyperband", jobs=3,
                             parallel=1, static={"epochs": "3"})
    request[CONFIG]["RandomSeed"] = 2
    session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    described = wait_tuning(session, "band")
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    trials = _trials(session, "band")
    stopped = [t for t in trials if t["TrainingJobStatus"] == "Stopped"]
    assert stopped, [(_loss(t), t["TrainingJobStatus"]) for t in trials]
    for trial in stopped:  # worse than a trial before it; the best never stops
        before = trials[:trials.index(trial)]
        assert any(_loss(t) < _loss(trial) for t in before)
    best = min(trials, key=_loss)
    assert best["TrainingJobStatus"] == "Completed"
    assert described["BestTrainingJob"]["TrainingJobName"] == best["TrainingJobName"]
    assert_no_processes(session.home)


def test_a_target_objective_ends_the_job_early_completed(
        session: LocalSession, tmp_path: Path) -> None:
    """The grid's third combination reaches the target: no fourth trial starts."""
    ranges = {"CategoricalParameterRanges": [{"Name": "level", "Values": ["0", "6", "3", "1"]}]}
    request = tuning_request(session, tmp_path, "target", strategy="Grid", jobs=None,
                             parallel=1, ranges=ranges)
    request[CONFIG]["TuningJobCompletionCriteria"] = {
        "TargetObjectiveMetricValue": 0.5,
        "BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}
    session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    described = wait_tuning(session, "target")
    _valid("DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    assert [t["TunedHyperParameters"]["level"] for t in _trials(session, "target")] == [
        "0", "6", "3"]
    assert described["BestTrainingJob"]["TunedHyperParameters"] == {"level": "3"}
    assert described["TuningJobCompletionDetails"] == {
        "NumberOfTrainingJobsObjectiveNotImproving": 0}


def test_a_warm_start_from_a_finished_local_parent_and_the_refusal_of_a_running_one(
        session: LocalSession, tmp_path: Path) -> None:
    client = session.sagemaker_client
    client.create_hyper_parameter_tuning_job(**tuning_request(
        session, tmp_path, "parent", jobs=2, parallel=2))
    client.create_hyper_parameter_tuning_job(**tuning_request(
        session, tmp_path, "busy", jobs=1, parallel=1, static={"sleep": "300"}))
    wait_tuning(session, "parent")

    def child(name: str, parent: str) -> dict[str, Any]:
        request = tuning_request(session, tmp_path, name, strategy="Bayesian", jobs=1,
                                 parallel=1)  # the same script, uploaded again
        request["WarmStartConfig"] = {"WarmStartType": "IdenticalDataAndAlgorithm",
                                      "ParentHyperParameterTuningJobs": [
                                          {"HyperParameterTuningJobName": parent}]}
        return request

    with pytest.raises(client.exceptions.ClientError,
                       match=r"ParentHyperParameterTuningJobs\[0\]: the parent tuning job busy "
                             r"is InProgress"):
        client.create_hyper_parameter_tuning_job(**child("early", "busy"))
    assert not (session.home / "tuning-jobs" / "early").exists()
    client.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName="busy")

    client.create_hyper_parameter_tuning_job(**child("child", "parent"))
    described = wait_tuning(session, "child")
    _valid("DescribeHyperParameterTuningJob", described)
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    assert described["WarmStartConfig"]["WarmStartType"] == "IdenticalDataAndAlgorithm"
    every = _trials(session, "parent") + _trials(session, "child")
    overall = described["OverallBestTrainingJob"]
    assert overall["TrainingJobName"] == min(every, key=_loss)["TrainingJobName"]
    assert overall["TuningJobName"] in ("parent", "child")
    wait_tuning(session, "busy")
    assert_no_processes(session.home)


def test_without_optuna_a_bayesian_job_is_one_line_before_anything_runs(
        session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if it were not installed
    request = tuning_request(session, tmp_path, "nope", strategy="Bayesian")
    with pytest.raises(session.sagemaker_client.exceptions.ClientError,
                       match=r"strategy Bayesian needs the `tune` extra: "
                             r"pip install 'ddpjob\[tune\]'"):
        session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    assert not (session.home / "tuning-jobs" / "nope").exists()


@pytest.mark.parametrize(("change", "refusal"), [
    (lambda r: r.update(WarmStartConfig={"WarmStartType": "TransferLearning",
                                         "ParentHyperParameterTuningJobs": [
                                             {"HyperParameterTuningJobName": "ghost"}]}),
     r"ParentHyperParameterTuningJobs\[0\]: no local tuning job named 'ghost'"),
    (lambda r: r.update(WarmStartConfig={"WarmStartType": "TransferLearning",
                                         "ParentHyperParameterTuningJobs": [
                                             {"HyperParameterTuningJobName": f"p{n}"}
                                             for n in range(6)]}),
     "6 items, SageMaker allows at most 5"),
    (lambda r: r[CONFIG].update(TuningJobCompletionCriteria={
        "ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}}),
     "ConvergenceDetected: AWS's convergence rule is undocumented"),
])
def test_what_a_local_tuning_job_cannot_honour_is_one_refusal(
        session: LocalSession, tmp_path: Path, change: Any, refusal: str) -> None:
    request = tuning_request(session, tmp_path, "refused")
    change(request)
    with pytest.raises(session.sagemaker_client.exceptions.ClientError, match=refusal):
        session.sagemaker_client.create_hyper_parameter_tuning_job(**request)
    assert not (session.home / "tuning-jobs" / "refused").exists()
