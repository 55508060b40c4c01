"""`tuner.analytics()`: the trials as v2's `HyperparameterTuningJobAnalytics` tabulates them,
every page of ListTrainingJobsForHyperParameterTuningJob, pandas imported only by
`dataframe()`."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

import pytest
from ddpjob.tuning import trials
from ddpjob.tuning.analytics import HyperparameterTuningJobAnalytics, row

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def summary(number: int, status: str = "Completed", value: float | None = 0.5,
            seconds: float | None = 30) -> dict[str, Any]:
    found: dict[str, Any] = {
        "TrainingJobName": f"t-{number:03d}", "TrainingJobStatus": status,
        "TunedHyperParameters": {"lr": "0.01", "optimizer": '"adam"'},
        "TrainingStartTime": T0}
    if seconds is not None:
        found["TrainingEndTime"] = T0 + dt.timedelta(seconds=seconds)
    if value is not None:
        found["FinalHyperParameterTuningJobObjectiveMetric"] = {"MetricName": "loss",
                                                                "Value": value}
    return found


class Pages:
    """A client's `list_training_jobs_for_hyper_parameter_tuning_job` over `count` trials."""

    def __init__(self, count: int) -> None:
        self.summaries = [summary(n) for n in range(1, count + 1)]
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        start = int(request.get("NextToken", 0))
        end = start + request["MaxResults"]
        page = {"TrainingJobSummaries": self.summaries[start:end]}
        return page | ({"NextToken": str(end)} if end < len(self.summaries) else {})


class FakeSession:
    def __init__(self, pages: Pages) -> None:
        self.pages = pages

    def describe_tuning_job(self, name: str) -> dict[str, Any]:
        return {"HyperParameterTuningJobName": name, "HyperParameterTuningJobConfig": {
            "ParameterRanges": {"ContinuousParameterRanges": [
                {"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1"}],
                "CategoricalParameterRanges": [{"Name": "optimizer",
                                                "Values": ['"adam"', '"sgd"']}]}}}

    def tuning_job_trials(self, name: str) -> list[dict[str, Any]]:
        return trials.summaries(self.pages, name)


def test_every_page_is_read() -> None:
    pages = Pages(230)
    found = trials.summaries(pages, "tune")
    assert [s["TrainingJobName"] for s in found] == [f"t-{n:03d}" for n in range(1, 231)]
    assert [call.get("NextToken") for call in pages.calls] == [None, "100", "200"]
    assert pages.calls[0] == {"HyperParameterTuningJobName": "tune", "MaxResults": 100,
                              "SortBy": "Name", "SortOrder": "Ascending"}


def test_a_row_is_v2s() -> None:
    assert row(summary(1)) == {
        "lr": 0.01, "optimizer": '"adam"', "TrainingJobName": "t-001",
        "TrainingJobStatus": "Completed", "FinalObjectiveValue": 0.5,
        "TrainingStartTime": T0, "TrainingEndTime": T0 + dt.timedelta(seconds=30),
        "TrainingElapsedTimeSeconds": 30.0}
    running = row(summary(2, status="InProgress", value=None, seconds=None))
    assert running["FinalObjectiveValue"] is None
    assert running["TrainingEndTime"] is None and running["TrainingElapsedTimeSeconds"] is None


def test_the_dataframe_has_a_row_per_trial_and_is_kept() -> None:
    pages = Pages(3)
    analytics = HyperparameterTuningJobAnalytics("tune", FakeSession(pages))
    frame = analytics.dataframe()
    assert list(frame.columns) == ["lr", "optimizer", "TrainingJobName", "TrainingJobStatus",
                                   "FinalObjectiveValue", "TrainingStartTime",
                                   "TrainingEndTime", "TrainingElapsedTimeSeconds"]
    assert frame.TrainingJobName.tolist() == ["t-001", "t-002", "t-003"]
    assert analytics.dataframe() is frame and len(pages.calls) == 1
    assert analytics.dataframe(force_refresh=True) is not frame and len(pages.calls) == 2
    assert analytics.tuning_ranges == {
        "lr": {"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1"},
        "optimizer": {"Name": "optimizer", "Values": ['"adam"', '"sgd"']}}
    assert repr(analytics) == "<ddpjob.HyperparameterTuningJobAnalytics for tune>"


def test_without_pandas_the_rows_remain_and_dataframe_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    analytics = HyperparameterTuningJobAnalytics("tune", FakeSession(Pages(2)))
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert [r["TrainingJobName"] for r in analytics.rows()] == ["t-001", "t-002"]
    with pytest.raises(ModuleNotFoundError, match=r"the tuning job's dataframe\(\) needs "
                                                  r"pandas.*pip install pandas.*rows\(\)"):
        analytics.dataframe()

