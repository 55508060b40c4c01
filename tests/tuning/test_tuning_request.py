"""The CreateHyperParameterTuningJob request built from the estimator's plan, and AWS's rules
refused when the tuner is made (or when `fit` builds the request), before anything is stored."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from ddpjob import CategoricalParameter, ContinuousParameter, HyperparameterTuner, IntegerParameter
from ddpjob import request as training_request
from ddpjob.errors import UserInputError
from ddpjob.tuning import request as tuning_request
from ddpjob.tuning import rules
from ddpjob.tuning.tuner import tuning_name_from_base

LR = {"lr": ContinuousParameter(1e-4, 1e-1, "Logarithmic")}
GRID = {"optimizer": CategoricalParameter(["adam", "sgd"]),
        "batch": CategoricalParameter([32, 64, 128])}


def _tuner(estimator: Any, ranges: dict | None = None, **changes: Any) -> HyperparameterTuner:
    return HyperparameterTuner(estimator, "loss", LR if ranges is None else ranges,
                               **{"objective_type": "Minimize", **changes})


def test_the_trials_carry_everything_the_plain_job_would(local_estimator, tmp_path: Path,
                                                        caplog) -> None:
    data = tmp_path / "data"
    data.mkdir()
    estimator = local_estimator(
        environment={"MODE": "fast"}, checkpoint_s3_uri=f"file://{tmp_path}/ckpt",
        max_retry_attempts=2, use_spot_instances=True, max_wait=7200, max_run=3600,
        output_path=f"file://{tmp_path}/out", tags=[{"Key": "team", "Value": "ml"}],
        distribution={"torch_distributed": {"enabled": True}}, instance_count=2)
    tuner = _tuner(estimator, {**LR, "layers": IntegerParameter(1, 4)}, strategy="Random",
                   max_jobs=6, max_parallel_jobs=2, random_seed=11, max_runtime_in_seconds=600,
                   tags={"project": "p1"})
    with caplog.at_level(logging.WARNING):
        request = tuner.tuning_job_request({"train": str(data)}, job_name="tune-parity")
    # nothing lost (`parity`); the one warning: every trial gets the same checkpoint URI
    assert [r.getMessage().split(" ")[0] for r in caplog.records] == ["CheckpointConfig.S3Uri"]
    plain = estimator.training_job_request({"train": str(data)}, job_name="tune-parity")
    definition = request["TrainingJobDefinition"]
    for member in ("InputDataConfig", "Environment", "CheckpointConfig", "RetryStrategy",
                   "EnableManagedSpotTraining", "StoppingCondition", "OutputDataConfig",
                   "ResourceConfig", "RoleArn"):
        assert definition[member] == plain[member], member
    assert definition["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600,
                                               "MaxWaitTimeInSeconds": 7200}
    static = dict(plain["HyperParameters"])
    del static["lr"]  # tuned, so not static (as v2)
    assert definition["StaticHyperParameters"] == static
    assert static["sagemaker_program"] == '"train.py"'
    assert static["sagemaker_torch_distributed_enabled"] == "true"
    assert definition["AlgorithmSpecification"] == plain["AlgorithmSpecification"]
    assert request["Tags"] == [{"Key": "team", "Value": "ml"},
                               {"Key": "project", "Value": "p1"}]
    assert request["HyperParameterTuningJobConfig"] == {
        "Strategy": "Random", "TrainingJobEarlyStoppingType": "Off", "RandomSeed": 11,
        "ResourceLimits": {"MaxNumberOfTrainingJobs": 6, "MaxParallelTrainingJobs": 2,
                           "MaxRuntimeInSeconds": 600},
        "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "loss"},
        "ParameterRanges": tuner.hyperparameter_ranges()}
    training_request.validate_request(request, tuning_request.OPERATION)  # botocore's model


def test_the_tuners_metric_definitions_replace_the_estimators(local_estimator) -> None:
    accuracy = [{"Name": "acc", "Regex": r"acc=(\S+)"}]
    tuner = HyperparameterTuner(local_estimator(), "acc", LR, metric_definitions=accuracy)
    request = tuner.tuning_job_request(job_name="tune-metrics")
    assert request["TrainingJobDefinition"]["AlgorithmSpecification"]["MetricDefinitions"] == \
        accuracy


def test_grid_sends_its_count_only_when_given(local_estimator) -> None:
    tuner = _tuner(local_estimator(), GRID, strategy="Grid")
    limits = tuner.tuning_job_request(job_name="tune-grid")[rules.CONFIG]["ResourceLimits"]
    assert limits == {"MaxParallelTrainingJobs": 1}
    tuner = _tuner(local_estimator(), GRID, strategy="Grid", max_jobs=6)
    limits = tuner.tuning_job_request(job_name="tune-grid")[rules.CONFIG]["ResourceLimits"]
    assert limits == {"MaxParallelTrainingJobs": 1, "MaxNumberOfTrainingJobs": 6}


def test_hyperband_takes_its_max_resource_from_epochs(local_estimator) -> None:
    tuner = _tuner(local_estimator(), strategy="Hyperband",
                   strategy_config={"HyperbandStrategyConfig": {"MinResource": 1}})
    assert tuner.tuning_job_request(job_name="tune-hb")[rules.CONFIG]["StrategyConfig"] == \
        {"HyperbandStrategyConfig": {"MinResource": 1}}


@pytest.mark.parametrize(("ranges", "changes", "match"), [
    (GRID | LR, {"strategy": "Grid"}, r"^hyperparameter_ranges: the Grid strategy supports only "
                                      r"categorical parameters; lr is"),
    (GRID, {"strategy": "Grid", "max_jobs": 5},
     r"^max_jobs: with the Grid strategy it must equal the number of distinct categorical "
     r"combinations, 6, or be left out; got 5"),
    (GRID, {"strategy": "Grid", "early_stopping_type": "Auto"},
     r"^early_stopping_type: must be Off with the Grid strategy, got Auto"),
    (None, {"strategy": "Hyperband", "early_stopping_type": "Auto"},
     r"^early_stopping_type: must be Off with the Hyperband strategy"),
    (None, {"strategy": "Random", "strategy_config": {"HyperbandStrategyConfig": {}}},
     r"^strategy_config: is for the Hyperband strategy only, and the strategy is Random"),
    (None, {"strategy": "Hyperband",
            "strategy_config": {"HyperbandStrategyConfig": {"MinResource": 9,
                                                            "MaxResource": 3}}},
     r"^strategy_config: Hyperband's MinResource must not exceed its MaxResource 3, got 9"),
    (None, {"strategy": "Hyperband",
            "strategy_config": {"HyperbandStrategyConfig": {"MaxResource": 20_001}}},
     r"^strategy_config: Hyperband's MaxResource is at most 20000, got 20001"),
    (None, {"metric_definitions": [{"Name": "acc", "Regex": "acc=(.*)"}]},
     r"^metric_definitions: A metric is required for this hyperparameter tuning job objective\. "
     r"Provide a metric in the metric definitions\. The objective 'loss' is not among \['acc'\]"),
    (None, {"strategy": "bayes"}, r"^strategy must be one of Bayesian, Random, Hyperband, Grid"),
    (None, {"objective_type": "max"}, r"^objective_type must be one of Maximize, Minimize"),
    (None, {"early_stopping_type": "On"}, r"^early_stopping_type must be one of Off, Auto"),
    (None, {"max_jobs": 0}, r"^max_jobs must be an integer >= 1, got 0"),
    (None, {"max_parallel_jobs": "2"}, r"^max_parallel_jobs must be an integer"),
    (None, {"max_runtime_in_seconds": 60}, r"^max_runtime_in_seconds must be an integer "
                                           r"between 120 and 15768000"),
    (None, {"random_seed": -1}, r"^random_seed must be an integer >= 0"),
    (None, {"base_tuning_job_name": "no_underscores"}, r"^base_tuning_job_name 'no_underscores'"),
    (None, {"warm_start_config": "parent-1"}, r"^warm_start_config must be the official SDK's "
                                              r"object or a dict"),
    (None, {"autotune": True}, r"^autotune is not supported by ddpjob's tuner yet"),
    (None, {"estimator_name": "a"}, r"^estimator_name is not supported"),
    (None, {"max_job": 3}, r"^HyperparameterTuner got an unexpected argument 'max_job'"),
    ({"sagemaker_program": CategoricalParameter(["a.py"])}, {},
     r"^hyperparameter_ranges: 'sagemaker_program' is set by ddpjob"),
])
def test_what_aws_refuses_is_refused_when_the_tuner_is_made(
        local_estimator, ranges: dict | None, changes: dict, match: str) -> None:
    with pytest.raises(UserInputError, match=match) as raised:
        _tuner(local_estimator(), ranges, **changes)
    assert "\n" not in str(raised.value)


def test_hyperband_without_a_max_resource_needs_epochs(local_estimator) -> None:
    with pytest.raises(UserInputError, match=r"^strategy_config: Hyperband's MaxResource is "
                                             r"needed: AWS infers it only from a static "
                                             r"hyperparameter named one of epochs"):
        _tuner(local_estimator(hyperparameters={"lr": 0.1}), strategy="Hyperband")


def test_job_names(local_estimator) -> None:
    tuner = _tuner(local_estimator())
    with pytest.raises(UserInputError, match=r"^job_name: a tuning job name has 1 to 32 letters"):
        tuner.tuning_job_request(job_name="a-name-that-is-longer-than-32-chars")
    with pytest.raises(UserInputError, match=r"^job_name: .* got 'tune_1'"):
        tuner.tuning_job_request(job_name="tune_1")
    names = {tuning_name_from_base("pytorch-training-job-base") for _ in range(20)}
    assert len(names) == 20
    assert all(len(name) <= 32 and rules.NAME_PATTERN.match(name) for name in names)
    generated = tuner.tuning_job_request()["HyperParameterTuningJobName"]
    assert re.fullmatch(r"ddpjob-local-\d{6}-\d{6}-[0-9a-f]{4}", generated)


def test_the_official_sdks_config_objects_are_taken(local_estimator,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    from sagemaker.tuner import TuningJobCompletionCriteriaConfig, WarmStartConfig, WarmStartTypes

    tuner = _tuner(local_estimator(),
                   warm_start_config=WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING, {"p-1"}),
                   completion_criteria_config=TuningJobCompletionCriteriaConfig(
                       max_number_of_training_jobs_not_improving=4))
    request = tuner.tuning_job_request(job_name="tune-warm")
    assert request["WarmStartConfig"] == {
        "WarmStartType": "TransferLearning",
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "p-1"}]}
    assert request[rules.CONFIG]["TuningJobCompletionCriteria"] == {
        "BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 4}}


def test_botocores_maxima_are_checked_too(local_estimator) -> None:
    parents = [{"HyperParameterTuningJobName": f"p-{i}"} for i in range(6)]
    tuner = _tuner(local_estimator(), warm_start_config={
        "WarmStartType": "TransferLearning", "ParentHyperParameterTuningJobs": parents})
    with pytest.raises(UserInputError, match=r"WarmStartConfig.ParentHyperParameterTuningJobs "
                                             r"has 6 entries, at most 5 allowed"):
        tuner.tuning_job_request(job_name="tune-parents")
    tuner = _tuner(local_estimator(), completion_criteria_config={
        "BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 2}})
    with pytest.raises(UserInputError, match=r"MaxNumberOfTrainingJobsNotImproving, value: 2, "
                                             r"valid min value: 3"):
        tuner.tuning_job_request(job_name="tune-improving")


def test_a_request_with_a_tuned_static_hyperparameter_is_refused(local_estimator) -> None:
    """ddpjob's tuner leaves tuned names out of the static ones (as v2); a request built
    elsewhere with both is refused, naming the member."""
    request = _tuner(local_estimator()).tuning_job_request(job_name="tune-both")
    request["TrainingJobDefinition"]["StaticHyperParameters"]["lr"] = "0.1"
    with pytest.raises(rules.RuleBroken, match=r"^TrainingJobDefinition.StaticHyperParameters: "
                                               r"lr is both tuned and static"):
        tuning_request.validate_tuning_request(request)


def test_what_a_trial_cannot_carry(local_estimator, caplog) -> None:
    estimator = local_estimator(tensorboard_output_config={"S3OutputPath": "file:///tmp/tb"})
    with caplog.at_level(logging.WARNING):
        _tuner(estimator).tuning_job_request(job_name="tune-tb")
    assert "TensorBoardOutputConfig: a trial lost the plain training job's" in caplog.text
    with pytest.raises(UserInputError, match=r"cannot run an image's ContainerEntrypoint"):
        tuning_request.training_job_definition(
            {"AlgorithmSpecification": {"TrainingImage": "x", "ContainerEntrypoint": ["run"]}},
            _tuner(estimator)._config())


def test_a_tuner_without_a_job_says_so(local_estimator) -> None:
    with pytest.raises(UserInputError, match=r"No tuning job available: call fit\(\) or "
                                             r"attach\(\) first"):
        _tuner(local_estimator()).describe()


def test_the_wire_is_v2s_and_v2s_requests_pass_the_rules(local_estimator,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranges are the official SDK v2's for a framework estimator, and a request v2's
    session builds (its own classmethods) passes the checks a later local control plane runs."""
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    from sagemaker import parameter as v2
    from sagemaker.session import Session as V2Session

    ours = {"lr": ContinuousParameter(1e-4, 0.1, "Logarithmic"), "layers": IntegerParameter(1, 4),
            "optimizer": CategoricalParameter(["adam", "sgd"])}
    official = {"lr": v2.ContinuousParameter(1e-4, 0.1, "Logarithmic"),
                "layers": v2.IntegerParameter(1, 4),
                "optimizer": v2.CategoricalParameter(["adam", "sgd"])}
    v2_ranges = {f"{kind}ParameterRanges": [
        parameter.as_json_range(name) if kind == "Categorical" else parameter.as_tuning_range(name)
        for name, parameter in official.items() if parameter.__name__ == kind]
        for kind in ("Continuous", "Categorical", "Integer")}
    tuner = _tuner(local_estimator(), ours, strategy="Random", max_jobs=4)
    assert tuner.hyperparameter_ranges() == v2_ranges

    ddpjob_request = tuner.tuning_job_request(job_name="tune-v2")
    definition = ddpjob_request["TrainingJobDefinition"]
    request = {
        "HyperParameterTuningJobName": "tune-v2",
        "HyperParameterTuningJobConfig": V2Session._map_tuning_config(
            strategy="Random", max_jobs=4, max_parallel_jobs=1, objective_type="Minimize",
            objective_metric_name="loss", parameter_ranges=v2_ranges),
        "TrainingJobDefinition": V2Session._map_training_config(
            static_hyperparameters=definition["StaticHyperParameters"], input_mode="File",
            role=definition["RoleArn"], output_config=definition["OutputDataConfig"],
            stop_condition=definition["StoppingCondition"],
            hpo_resource_config={"InstanceType": "ml.m5.xlarge", "InstanceCount": 2,
                                 "VolumeSizeInGB": 30},
            metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}],
            image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cpu")}
    assert tuning_request.validate_tuning_request(request) is request
    request["HyperParameterTuningJobConfig"]["Strategy"] = "Grid"
    with pytest.raises(rules.RuleBroken, match=r"the Grid strategy supports only categorical"):
        tuning_request.validate_tuning_request(request)
