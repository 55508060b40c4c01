"""A SageMaker training job's metric series from CloudWatch, as the official SDK reads it:
namespace `/aws/sagemaker/TrainingJobs`, one-minute averages per MetricDefinition."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from ddpjob_runtime.shared.contract import CLOUDWATCH_LOG_GROUP

from ddpjob.job_status import JobDescription, MetricRow

if TYPE_CHECKING:  # pragma: no cover
    from botocore.client import BaseClient

PERIOD_S = 60


def cloudwatch_series(cloudwatch: BaseClient, job: JobDescription,
                      metric_names: list[str]) -> list[MetricRow]:
    """`{"timestamp", "metric_name", "value"}` rows of `metric_names` of `job`."""
    start = job.training_start_time or job.creation_time
    end = (job.training_end_time or dt.datetime.now(dt.timezone.utc)) + \
        dt.timedelta(seconds=PERIOD_S)
    rows = []
    for name in metric_names:
        points = cloudwatch.get_metric_statistics(
            Namespace=CLOUDWATCH_LOG_GROUP, MetricName=name, StartTime=start, EndTime=end,
            Dimensions=[{"Name": "TrainingJobName", "Value": job.name}],
            Period=PERIOD_S, Statistics=["Average"])["Datapoints"]
        rows += [{"timestamp": (p["Timestamp"] - start).total_seconds(), "metric_name": name,
                  "value": p["Average"]} for p in sorted(points, key=lambda p: p["Timestamp"])]
    return rows
