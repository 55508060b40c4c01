"""The scheduler interface every backend implements (TorchX's schedulers, in SageMaker's words):
`submit_dryrun`, `submit`, `describe`, `stop`, `list`, `logs`. Its policy (one `Backend` value,
and its default output folder) is mixed in from `session_policy`, the official SDK's notebook
methods from `notebook_session`.

A backend implements ten members: `backend` (its policy value), `default_output_path`, and the
scheduler's `submit_dryrun`, `_reserve`, `_schedule`, `_describe`, `_stop`, `_logs`, `list`,
`_metric_series`; everything else has a default it may override.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ddpjob.errors import UserInputError
from ddpjob.job_status import JobDescription, MetricRow
from ddpjob.naming import check_job_name
from ddpjob.notebook_session import NotebookConveniences
from ddpjob.session_policy import SessionPolicy
from ddpjob.training_job import TrainingJob

#: What `submit` calls between reserving the job name and scheduling the job (uploads).
Stage = Callable[[], None]


class BaseSession(SessionPolicy, NotebookConveniences):
    """A control plane for training jobs: SageMaker (`Session`) or this machine (`LocalSession`)."""

    # --- jobs --------------------------------------------------------------------------------

    @abc.abstractmethod
    def submit_dryrun(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The CreateTrainingJob request as this backend would send it, checked; changes
        nothing anywhere (no bucket, no name, no upload)."""

    def submit(self, request: Mapping[str, Any], stage: Stage | None = None) -> TrainingJob:
        """Check `request` (`submit_dryrun`), then `submit_checked` it."""
        return self.submit_checked(self.submit_dryrun(request), stage)

    def submit_checked(self, checked: dict[str, Any], stage: Stage | None = None) -> TrainingJob:
        """Reserve the job name of a request this session's `submit_dryrun` answered (not
        checked again), run `stage` (the uploads), then start the job.

        A name that is taken is refused before `stage` runs; when `stage` fails the name is
        given back and nothing is started.
        """
        name = checked["TrainingJobName"]
        self._reserve(checked)
        try:
            if stage is not None:
                stage()
        except BaseException:
            self._release(name)
            raise
        self._schedule(checked)
        return TrainingJob(self, name)

    @abc.abstractmethod
    def _reserve(self, request: dict[str, Any]) -> None:
        """Take the job's name (and make what it needs exist) before anything is uploaded."""

    def _release(self, job_name: str) -> None:  # noqa: B027 - a backend may hold nothing
        """Give back a name taken by `_reserve` for a job that will not start."""

    @abc.abstractmethod
    def _schedule(self, request: dict[str, Any]) -> None:
        """Start the job of a checked, reserved request."""

    def describe(self, job_name: str) -> JobDescription:
        """The description of `job_name` (JobNotFoundError when there is none)."""
        return JobDescription.from_response(self._describe(check_job_name(job_name)))

    def stop(self, job_name: str) -> None:
        """Ask the control plane to stop `job_name`; it ends Stopped."""
        self._stop(check_job_name(job_name))

    def logs(self, job_name: str, follow: bool = True) -> Iterator[tuple[str, str]]:
        """Yield `(host, line)` of every host of the job, in arrival order.

        With `follow`, keep waiting for new lines until the job has ended and its logs are
        drained; without, yield what exists now and return.
        """
        self.describe(job_name)  # a clear error now for an unknown job
        return self._logs(job_name, follow)

    def stacks(self, job_name: str) -> str:
        """Every rank's Python stacks of the running job `job_name`, each headed by host and
        rank: local jobs only (see `LocalSession.stacks`); here one clear error."""
        raise UserInputError(
            f"stacks: only local jobs show their ranks' stacks; the processes of "
            f"{self.backend.label} job {check_job_name(job_name)} are not on this machine "
            f"(rehearse the job locally with instance_type='local' to see where a hung rank is)")

    @abc.abstractmethod
    def list(self, max_results: int | None = None, **filters: Any) -> list[dict[str, Any]]:
        """The TrainingJobSummaries that ListTrainingJobs returns for `filters` (e.g.
        NameContains, StatusEquals, SortBy), across pages, at most `max_results` of them."""

    def metric_series(self, job_name: str,
                      metric_names: list[str] | None = None) -> list[MetricRow]:
        """Every `{"timestamp", "metric_name", "value"}` of the metrics `metric_names` (default:
        the job's MetricDefinitions), oldest first, in seconds since its training started."""
        job = self.describe(job_name)
        return self._metric_series(job, list(job.metric_names if metric_names is None
                                             else metric_names))

    # --- hyperparameter tuning jobs (docs/tuning.md) ------------------------------------------

    def submit_tuning_job(self, request: Mapping[str, Any], stage: Stage | None = None,
                          lost: Sequence[str] = ()) -> None:
        """Check a CreateHyperParameterTuningJob request, reserve its name, run `stage` (the
        uploads), then start it; `lost`: the lines naming what its trials lose against the
        plain training job (`tuning.parity`), which a local tuning job keeps among its
        diagnostics. A backend that runs tuning jobs overrides the four methods."""
        raise self._no_tuning_jobs()

    def describe_tuning_job(self, name: str) -> dict[str, Any]:
        """The DescribeHyperParameterTuningJob response of `name`."""
        raise self._no_tuning_jobs()

    def stop_tuning_job(self, name: str) -> None:
        """Ask the control plane to stop the tuning job `name` and its running trials."""
        raise self._no_tuning_jobs()

    def tuning_job_trials(self, name: str) -> list[dict[str, Any]]:
        """Every TrainingJobSummary of the tuning job `name` (all the pages of
        ListTrainingJobsForHyperParameterTuningJob), in the order the trials started."""
        raise self._no_tuning_jobs()

    def tuning_diagnostics(self, name: str) -> list[str]:
        """What ddpjob found that the tuning job `name`'s trials lost or got wrong, one line
        each (docs/tuning.md): a local tuning job's controller finds them; SageMaker keeps
        none (ddpjob's tuner logs what the request shows when it starts one)."""
        return []

    def _no_tuning_jobs(self) -> UserInputError:
        return UserInputError(
            f"hyperparameter tuning jobs: the {self.backend.label} backend runs none "
            f"(docs/tuning.md); tune with session=ddpjob.LocalSession() or ddpjob.Session()")

    @abc.abstractmethod
    def _metric_series(self, job: JobDescription,
                       metric_names: list[str]) -> list[MetricRow]: ...

    @abc.abstractmethod
    def _describe(self, job_name: str) -> dict[str, Any]:
        """The DescribeTrainingJob response of `job_name`."""

    @abc.abstractmethod
    def _stop(self, job_name: str) -> None: ...

    @abc.abstractmethod
    def _logs(self, job_name: str, follow: bool) -> Iterator[tuple[str, str]]: ...
