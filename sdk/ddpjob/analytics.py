"""A training job's metric time series, as the official SDK's `TrainingJobAnalytics` gives it.

Rows `timestamp` (seconds since the training started), `metric_name`, `value`, oldest first: a
pandas DataFrame when pandas is installed, else a list of dicts. A local job's series is what its
supervisor matched in the hosts' logs (`ddpjob.local.metrics`); a SageMaker job's comes from
CloudWatch (namespace `/aws/sagemaker/TrainingJobs`, one-minute averages, like the official SDK).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

NAMESPACE = "/aws/sagemaker/TrainingJobs"
PERIOD_S = 60
COLUMNS = ["timestamp", "metric_name", "value"]


def metrics_for_job(session: Any, job_name: str, metric_names: list[str] | None = None) -> Any:
    """The metric series of `job_name` (all of its MetricDefinitions, or `metric_names`)."""
    job = session.describe_training_job(job_name)  # a clear error for an unknown job
    start = job.get("TrainingStartTime") or job["CreationTime"]
    if getattr(session, "local", False):
        rows = _local_rows(session, job_name, start)
    else:
        rows = _cloudwatch_rows(session, job, start, metric_names)
    rows = [r for r in rows if metric_names is None or r["metric_name"] in metric_names]
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows, columns=COLUMNS)


def _local_rows(session: Any, job_name: str, start: dt.datetime) -> list[dict[str, Any]]:
    from ddpjob.local import metrics

    return [{"timestamp": r["Timestamp"] - start.timestamp(), "metric_name": r["MetricName"],
             "value": r["Value"]} for r in metrics.series(session.job_dir(job_name))]


def _cloudwatch_rows(session: Any, job: dict[str, Any], start: dt.datetime,
                     metric_names: list[str] | None) -> list[dict[str, Any]]:
    definitions = job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or []
    names = metric_names or [d["Name"] for d in definitions]
    end = (job.get("TrainingEndTime") or dt.datetime.now(dt.timezone.utc)) + \
        dt.timedelta(seconds=PERIOD_S)
    cloudwatch = session.boto_session.client("cloudwatch", region_name=session.region_name)
    rows = []
    for name in names:
        points = cloudwatch.get_metric_statistics(
            Namespace=NAMESPACE, MetricName=name, StartTime=start, EndTime=end,
            Dimensions=[{"Name": "TrainingJobName", "Value": job["TrainingJobName"]}],
            Period=PERIOD_S, Statistics=["Average"])["Datapoints"]
        rows += [{"timestamp": (p["Timestamp"] - start).total_seconds(), "metric_name": name,
                  "value": p["Average"]} for p in sorted(points, key=lambda p: p["Timestamp"])]
    return rows
