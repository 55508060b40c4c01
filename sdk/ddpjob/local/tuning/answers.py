"""DescribeHyperParameterTuningJob and the lists' shapes, from a tuning job's request and state."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from typing import Any

from ddpjob.local.base.arns import job_arn, tuning_job_arn
from ddpjob.local.tuning import completion, trials
from ddpjob.local.tuning.tuningstate import Trial, TuningState

CONFIG = "HyperParameterTuningJobConfig"
# The request members DescribeHyperParameterTuningJob echoes.
_ECHOED = (CONFIG, "TrainingJobDefinition", "TrainingJobDefinitions", "WarmStartConfig",
           "Autotune")
# A trial's TrainingJobStatus -> its counter (a failed trial's error counts as the client's).
_STATUS_COUNTER = {"Completed": "Completed", "InProgress": "InProgress", "Stopping": "InProgress",
                   "Stopped": "Stopped", "Failed": "NonRetryableError"}


def _time(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds).astimezone()


def objective(request: dict[str, Any]) -> dict[str, str]:
    """The tuning objective: `{"Type": Maximize|Minimize, "MetricName": ...}`."""
    return request[CONFIG]["HyperParameterTuningJobObjective"]


def best(request: dict[str, Any], state: TuningState) -> Trial | None:
    """The trial with the best objective among those that succeeded (the first on a tie)."""
    sign = 1 if objective(request)["Type"] == "Maximize" else -1
    succeeded = state.succeeded()
    return max(succeeded, key=lambda t: sign * t.objective) if succeeded else None


def trial_summary(request: dict[str, Any], trial: Trial) -> dict[str, Any]:
    """A `HyperParameterTrainingJobSummary`."""
    summary: dict[str, Any] = {
        "TrainingJobName": trial.name, "TrainingJobArn": job_arn(trial.name),
        "TuningJobName": request["HyperParameterTuningJobName"],
        "CreationTime": _time(trial.creation_time), "TrainingJobStatus": trial.status,
        "TunedHyperParameters": dict(trial.values), "ObjectiveStatus": trial.objective_status,
    }
    times = {"TrainingStartTime": trial.start_time, "TrainingEndTime": trial.end_time}
    summary.update({k: _time(v) for k, v in times.items() if v is not None})
    if trial.failure_reason:
        summary["FailureReason"] = trial.failure_reason
    if trial.objective is not None:
        summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
            **objective(request), "Value": trial.objective}
    return summary


def _counters(state: TuningState) -> tuple[dict[str, int], dict[str, int]]:
    by_status = Counter(_STATUS_COUNTER.get(t.status, "InProgress") for t in state.trials)
    by_objective = Counter(t.objective_status for t in state.trials)
    return ({k: by_status[k] for k in ("Completed", "InProgress", "RetryableError",
                                       "NonRetryableError", "Stopped")},
            {k: by_objective[k] for k in ("Succeeded", "Pending", "Failed")})


def describe(request: dict[str, Any], state: TuningState) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's answer."""
    name = request["HyperParameterTuningJobName"]
    jobs, objectives = _counters(state)
    response: dict[str, Any] = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobArn": tuning_job_arn(name),
        "HyperParameterTuningJobStatus": state.status.value,
        "CreationTime": _time(state.creation_time),
        "LastModifiedTime": _time(state.last_modified_time),
        "TrainingJobStatusCounters": jobs, "ObjectiveStatusCounters": objectives,
        "ConsumedResources": {"RuntimeInSeconds": int(
            (state.end_time or time.time()) - state.creation_time)},
    }
    response.update({key: request[key] for key in _ECHOED if key in request})
    if "TrainingJobDefinition" in response:  # as the service keeps it: its objective, resources
        definition = response["TrainingJobDefinition"]
        static = definition.get("StaticHyperParameters") or {}
        response["TrainingJobDefinition"] = {
            **definition, "ResourceConfig": trials.resources(definition),
            "StaticHyperParameters": {**static, **trials.objective_hyperparameter(
                static, objective(request)["MetricName"])}}
    if state.end_time is not None:
        response["HyperParameterTuningEndTime"] = _time(state.end_time)
    if (found := best(request, state)) is not None:
        response["BestTrainingJob"] = trial_summary(request, found)
    if state.failure_reason:
        response["FailureReason"] = state.failure_reason
    response.update(completion.details(request[CONFIG].get("TuningJobCompletionCriteria"), state,
                                       objective(request)["Type"] == "Minimize"))
    return response


def summary(request: dict[str, Any], state: TuningState) -> dict[str, Any]:
    """A `HyperParameterTuningJobSummary` of ListHyperParameterTuningJobs."""
    described = describe(request, state)
    keys = ("HyperParameterTuningJobName", "HyperParameterTuningJobArn",
            "HyperParameterTuningJobStatus", "CreationTime", "HyperParameterTuningEndTime",
            "LastModifiedTime", "TrainingJobStatusCounters", "ObjectiveStatusCounters")
    return {**{k: described[k] for k in keys if k in described},
            "Strategy": request[CONFIG]["Strategy"],
            "ResourceLimits": request[CONFIG]["ResourceLimits"]}
