"""A training job's metric time series, as the official SDK's `TrainingJobAnalytics` gives it.

Rows `timestamp` (seconds since the training started), `metric_name`, `value`, oldest first, as
a pandas DataFrame (the rows as dicts: the session's `metric_series`). A local job's series is
what its supervisor matched in the hosts' logs (`ddpjob.local.watch.metrics`); a SageMaker
job's comes from CloudWatch (namespace `/aws/sagemaker/TrainingJobs`, one-minute averages, as
the official SDK reads it).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ddpjob.base_session import BaseSession

if TYPE_CHECKING:  # pragma: no cover
    import pandas

COLUMNS = ["timestamp", "metric_name", "value"]


def metrics_for_job(session: BaseSession, job_name: str,
                    metric_names: list[str] | None = None) -> pandas.DataFrame:
    """The metric series of `job_name` (all of its MetricDefinitions, or `metric_names`) as a
    pandas DataFrame; without pandas, one clear error (the rows themselves:
    `session.metric_series`)."""
    rows = session.metric_series(job_name, metric_names)
    return require_pandas("the metrics'", "session.metric_series(job_name)").DataFrame(
        rows, columns=COLUMNS)


def require_pandas(whose: str, without: str) -> ModuleType:
    """pandas, imported now (never at `import ddpjob`); without it, one ModuleNotFoundError
    naming `whose` dataframe() needs it and `without`, what gives the rows without it."""
    try:
        import pandas
    except ImportError:
        raise ModuleNotFoundError(
            f"{whose} dataframe() needs pandas, which is not installed: pip install pandas (or "
            f"read the rows without it: {without})", name="pandas") from None
    return pandas


class TrainingJobAnalytics:
    """The official SDK's `TrainingJobAnalytics` on a ddpjob session (SageMaker or local):
    `dataframe()` gives the job's metric series, what `estimator.training_job_analytics` holds."""

    def __init__(self, training_job_name: str, metric_names: list[str] | None = None,
                 sagemaker_session: BaseSession | None = None) -> None:
        if sagemaker_session is None:
            from ddpjob.sagemaker.session import Session

            sagemaker_session = Session()
        self.name = training_job_name
        self._metric_names = metric_names
        self._session = sagemaker_session
        self._dataframe: pandas.DataFrame | None = None

    def __repr__(self) -> str:
        return f"<ddpjob.TrainingJobAnalytics for {self.name}>"

    def clear_cache(self) -> None:
        """Forget the series read so far: the next `dataframe()` reads it again."""
        self._dataframe = None

    def dataframe(self, force_refresh: bool = False) -> pandas.DataFrame:
        """The series as a pandas DataFrame of `timestamp`, `metric_name`, `value` (needs
        pandas, as the official SDK's does)."""
        if force_refresh:
            self.clear_cache()
        if self._dataframe is None:
            self._dataframe = metrics_for_job(self._session, self.name, self._metric_names)
        return self._dataframe

    def export_csv(self, filename: str) -> None:
        """Write `dataframe()` to the CSV file `filename` (needs pandas)."""
        self.dataframe().to_csv(filename)
