"""Local MetricDefinitions: each Regex matched against every host's log as it streams; the last
values in DescribeTrainingJob's FinalMetricDataList, the series in `metrics_for_job`."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from ddpjob import analytics
from ddpjob.local import metrics

from tests.local.conftest import (
    assert_no_processes,
    source_tar,
    training_request,
    wait_until_ended,
)

SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
for step in range(4):
    if rank == 0:
        print(f"step={step} loss={1.0 / (step + 1)}", flush=True)
    time.sleep(0.3)
if rank == 1:
    print("epoch done: accuracy=0.75 loss=not-a-number", flush=True)
    print("accuracy=0.875", flush=True)
"""
DEFINITIONS = [{"Name": "train:loss", "Regex": r"loss=([0-9.]+)"},
               {"Name": "accuracy", "Regex": r"accuracy=([0-9.]+)"}]


def _request(session, tmp_path: Path, name: str, definitions: list[dict]) -> dict:
    script = tmp_path / "metrics_job.py"
    script.write_text(SCRIPT)
    request = training_request(session, name, source_tar(tmp_path / "code", script),
                               "metrics_job.py", hosts=2, workers=1)
    request["AlgorithmSpecification"]["MetricDefinitions"] = definitions
    return request


@pytest.mark.slow
def test_metrics_of_every_host_reach_describe_and_the_series(session, tmp_path, monkeypatch):
    name = "metrics-job"
    session.submit(_request(session, tmp_path, name, DEFINITIONS))
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    final = {m["MetricName"]: m for m in job["FinalMetricDataList"]}
    assert set(final) == {"train:loss", "accuracy"}
    assert final["train:loss"]["Value"] == 0.25 and final["accuracy"]["Value"] == 0.875
    for metric in final.values():
        assert isinstance(metric["Timestamp"], dt.datetime)
        assert job["TrainingStartTime"] <= metric["Timestamp"] <= job["TrainingEndTime"]

    frame = analytics.metrics_for_job(session, name)
    assert list(frame.columns) == ["timestamp", "metric_name", "value"]
    loss = frame[frame.metric_name == "train:loss"]
    assert loss.value.tolist() == [1.0, 0.5, 1.0 / 3, 0.25]
    assert loss.timestamp.is_monotonic_increasing and (loss.timestamp >= 0).all()
    assert frame[frame.metric_name == "accuracy"].value.tolist() == [0.75, 0.875]

    monkeypatch.setitem(sys.modules, "pandas", None)  # without pandas: a list of dicts
    rows = analytics.metrics_for_job(session, name, metric_names=["accuracy"])
    assert [(r["metric_name"], r["value"]) for r in rows] == [("accuracy", 0.75),
                                                             ("accuracy", 0.875)]
    assert_no_processes(session.home)


@pytest.mark.slow
def test_a_job_without_metric_definitions_has_no_final_metrics(session, tmp_path):
    session.submit(_request(session, tmp_path, "no-metrics", []))
    job = wait_until_ended(session, "no-metrics")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "FinalMetricDataList" not in job
    assert not (session.job_dir("no-metrics") / metrics.SERIES_FILE).exists()
    assert_no_processes(session.home)


@pytest.mark.parametrize(("regex", "expected"), [
    ("loss=([0-9.]+", "not a valid regular expression"),
    ("loss=[0-9.]+", "needs a capture group"),
])
def test_a_bad_regex_is_refused_before_the_job_exists(session, tmp_path, regex, expected):
    request = _request(session, tmp_path, "bad-regex", [{"Name": "loss", "Regex": regex}])
    with pytest.raises(ClientError, match=rf"MetricDefinitions\[0\] \('loss'\).*{expected}"):
        session.sagemaker_client.create_training_job(**request)
    assert not session.job_dir("bad-regex").exists()
