"""A training job's metric time series, as the official SDK's `TrainingJobAnalytics` gives it.

Rows `timestamp` (seconds since the training started), `metric_name`, `value`, oldest first: a
pandas DataFrame when pandas is installed, else a list of dicts. A local job's series is what its
supervisor matched in the hosts' logs (`ddpjob.local.metrics`); a SageMaker job's comes from
CloudWatch (namespace `/aws/sagemaker/TrainingJobs`, one-minute averages, like the official SDK).
"""

from __future__ import annotations

from typing import Any

COLUMNS = ["timestamp", "metric_name", "value"]


def metrics_for_job(session: Any, job_name: str, metric_names: list[str] | None = None) -> Any:
    """The metric series of `job_name` (all of its MetricDefinitions, or `metric_names`)."""
    rows = session.metric_series(job_name, metric_names)
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows, columns=COLUMNS)
