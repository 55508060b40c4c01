"""Local MetricDefinitions: each Regex matched against every host's log as it streams; the last
values in DescribeTrainingJob's FinalMetricDataList, the series in `metrics_for_job`."""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from ddpjob import analytics
from ddpjob.local.watch import metric_matcher, metrics

from tests.local.conftest import (
    assert_no_processes,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

# A plain script, one process per host (no torchrun, no torch): the supervisor's matching of
# every host's log is the subject; that a metric still matches behind torchrun's `[rank N] `
# prefix is test_rank_logs.py's.
SCRIPT = """
import os, sys, time
rank = int(os.environ["SM_CURRENT_HOST"].removeprefix("algo-")) - 1
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
                               "metrics_job.py", hosts=2, workers=1, distributed=False)
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

    analytics_of_job = analytics.TrainingJobAnalytics(name, sagemaker_session=session)
    assert analytics_of_job.dataframe().equals(frame)  # the official SDK's class, same series
    csv = tmp_path / "metrics.csv"
    analytics_of_job.export_csv(str(csv))
    assert "train:loss" in csv.read_text()

    monkeypatch.setitem(sys.modules, "pandas", None)  # without pandas: one clear error
    with pytest.raises(ModuleNotFoundError, match=r"dataframe\(\) needs pandas.*pip install "
                       r"pandas.*session.metric_series"):
        analytics.TrainingJobAnalytics(name, sagemaker_session=session).dataframe()
    rows = session.metric_series(name, ["accuracy"])  # the rows themselves
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


# --- a Regex that backtracks for ever ------------------------------------------------------

EVIL_LINE = "a" * 64 + "!"  # exponential for (a+)+$ in a backtracking engine
EVIL = {"Name": "evil", "Regex": r"(?<!c)(a+)+$"}  # a lookbehind: RE2 refuses it, `re` stalls
NESTED = {"Name": "nested", "Regex": r"(a+)+$"}  # RE2's, where google-re2 is installed
GOOD = {"Name": "loss", "Regex": r"loss=([0-9.]+)"}


def _disabled(text: str) -> set[str]:
    return set(re.findall(r"metric definition '(\w+)' disabled", text))


def test_a_stalling_regex_is_disabled_with_a_warning_and_the_others_go_on(caplog, monkeypatch):
    monkeypatch.setattr(metric_matcher, "MATCH_TIMEOUT_S", 0.5)  # the fast tier stays fast
    matcher = metric_matcher.Matcher([(d["Name"], d["Regex"]) for d in (EVIL, GOOD, NESTED)])
    try:
        found = matcher.search(["loss=0.5", EVIL_LINE, f"loss=0.25 {EVIL_LINE}"])
        assert found == [(0, "loss", "0.5"), (2, "loss", "0.25")]
        assert matcher.search(["loss=1", EVIL_LINE]) == [(0, "loss", "1")]
        expected = {"evil"} | (set() if metric_matcher.re2 else {"nested"})
        assert _disabled(caplog.text) == expected
        assert "(?<!c)(a+)+$" in caplog.text
    finally:
        matcher.close()
    assert matcher._child is None


SCRIPT_EVIL = f"""
import sys, time
print("loss=0.5", flush=True)
print("{EVIL_LINE}", flush=True)
print("loss=0.25", flush=True)
if "--sleep" in sys.argv:
    while True:
        time.sleep(1)
"""


def _evil_request(session, tmp_path: Path, name: str, sleep: bool) -> dict:
    script = tmp_path / "evil_job.py"
    script.write_text(SCRIPT_EVIL)
    request = training_request(session, name, source_tar(tmp_path / "code", script),
                               "evil_job.py", workers=1, distributed=False,
                               hyperparameters={"sleep": '"yes"'} if sleep else None)
    request["AlgorithmSpecification"]["MetricDefinitions"] = [EVIL, NESTED, GOOD]
    return request


@pytest.mark.slow
def test_a_job_with_a_stalling_regex_completes_and_another_stops(session, tmp_path):
    """The supervisor is never stalled: the job completes with the other metric's values, and
    a job stopped right after printing the line reaches Stopped."""
    session.submit(_evil_request(session, tmp_path, "evil-done", sleep=False))
    job = wait_until_ended(session, "evil-done")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [(m["MetricName"], m["Value"]) for m in job["FinalMetricDataList"]] == [("loss", 0.25)]
    assert "evil" in _disabled((session.job_dir("evil-done") / "supervisor.log").read_text())

    session.submit(_evil_request(session, tmp_path, "evil-stop", sleep=True))
    host_log = session.job_dir("evil-stop") / "logs" / "algo-1.log"
    wait_for(lambda: host_log.exists() and "loss=0.25" in host_log.read_text(), 120,
             "the job to print the line")
    session.stop("evil-stop")
    assert wait_until_ended(session, "evil-stop")["TrainingJobStatus"] == "Stopped"
    assert_no_processes(session.home)
