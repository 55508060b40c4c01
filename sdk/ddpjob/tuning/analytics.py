"""A tuning job's trials as a table, as the official SDK v2's `HyperparameterTuningJobAnalytics`
gives them: one row per trial (ListTrainingJobsForHyperParameterTuningJob, every page), its
tuned hyperparameters (numbers as floats, as v2's), `TrainingJobName`, `TrainingJobStatus`,
`FinalObjectiveValue`, `TrainingStartTime`, `TrainingEndTime`, `TrainingElapsedTimeSeconds`.

`rows()` needs nothing; `dataframe()` imports pandas when it is called (never at
`import ddpjob`), with one clear error when it is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpjob.analytics import require_pandas
from ddpjob.base_session import BaseSession

if TYPE_CHECKING:  # pragma: no cover
    import pandas


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def row(summary: Mapping[str, Any]) -> dict[str, Any]:
    """One trial's row from its TrainingJobSummary (v2's `reshape`); the elapsed seconds and
    the times are None while they are unknown."""
    start, end = summary.get("TrainingStartTime"), summary.get("TrainingEndTime")
    found = {name: _number_or_text(value)
             for name, value in summary["TunedHyperParameters"].items()}
    found.update({
        "TrainingJobName": summary["TrainingJobName"],
        "TrainingJobStatus": summary["TrainingJobStatus"],
        "FinalObjectiveValue": (summary.get("FinalHyperParameterTuningJobObjectiveMetric")
                                or {}).get("Value"),
        "TrainingStartTime": start, "TrainingEndTime": end,
        "TrainingElapsedTimeSeconds": (end - start).total_seconds() if start and end else None})
    if "TrainingJobDefinitionName" in summary:
        found["TrainingJobDefinitionName"] = summary["TrainingJobDefinitionName"]
    return found


class HyperparameterTuningJobAnalytics:
    """The official SDK v2's `HyperparameterTuningJobAnalytics` on a ddpjob session (SageMaker
    or local): `dataframe()` holds one row per trial; what `tuner.analytics()` returns."""

    def __init__(self, hyperparameter_tuning_job_name: str,
                 sagemaker_session: BaseSession | None = None) -> None:
        if sagemaker_session is None:
            from ddpjob.sagemaker.session import Session

            sagemaker_session = Session()
        self.name = hyperparameter_tuning_job_name
        self._session = sagemaker_session
        self._description: dict[str, Any] | None = None
        self._summaries: list[dict[str, Any]] | None = None
        self._dataframe: pandas.DataFrame | None = None

    def __repr__(self) -> str:
        return f"<ddpjob.HyperparameterTuningJobAnalytics for {self.name}>"

    def clear_cache(self) -> None:
        """Forget what was read so far: the next call reads it again."""
        self._description = self._summaries = self._dataframe = None

    def description(self, force_refresh: bool = False) -> dict[str, Any]:
        """The DescribeHyperParameterTuningJob response."""
        if force_refresh:
            self.clear_cache()
        if self._description is None:
            self._description = self._session.describe_tuning_job(self.name)
        return self._description

    @property
    def tuning_ranges(self) -> dict[str, dict[str, Any]]:
        """Each tuned hyperparameter's range as the request gives it, by name (v2's)."""
        ranges = self.description()["HyperParameterTuningJobConfig"]["ParameterRanges"]
        return {found["Name"]: found for kind in ranges.values() for found in kind}

    def training_job_summaries(self, force_refresh: bool = False) -> list[dict[str, Any]]:
        """Every trial's TrainingJobSummary, in the order the trials started."""
        if force_refresh:
            self.clear_cache()
        if self._summaries is None:
            self._summaries = self._session.tuning_job_trials(self.name)
        return self._summaries

    def rows(self, force_refresh: bool = False) -> list[dict[str, Any]]:
        """The dataframe's rows as dicts (no pandas needed)."""
        return [row(summary) for summary in self.training_job_summaries(force_refresh)]

    def dataframe(self, force_refresh: bool = False) -> pandas.DataFrame:
        """One row per trial as a pandas DataFrame (needs pandas, as v2's does)."""
        if force_refresh:
            self.clear_cache()
        if self._dataframe is None:
            pandas_module = require_pandas("the tuning job's", "tuner.analytics().rows()")
            self._dataframe = pandas_module.DataFrame(self.rows())
        return self._dataframe

    def export_csv(self, filename: str) -> None:
        """Write `dataframe()` to the CSV file `filename` (needs pandas)."""
        self.dataframe().to_csv(filename)
