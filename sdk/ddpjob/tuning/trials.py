"""A tuning job's trials: every page of ListTrainingJobsForHyperParameterTuningJob, read through
any client of boto3's shape (boto3's, or the local control plane's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The most trials one page holds (AWS's maximum for MaxResults).
PAGE = 100


def summaries(list_page: Callable[..., dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Every TrainingJobSummary of the tuning job `name`, by name (the trials' numbers: the
    order they started in), `list_page` being a client's
    `list_training_jobs_for_hyper_parameter_tuning_job`."""
    found: list[dict[str, Any]] = []
    token = None
    while True:
        page = list_page(HyperParameterTuningJobName=name, MaxResults=PAGE, SortBy="Name",
                         SortOrder="Ascending", **({"NextToken": token} if token else {}))
        found += page["TrainingJobSummaries"]
        token = page.get("NextToken")
        if not token:
            return found
