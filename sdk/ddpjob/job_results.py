"""What an estimator offers about its latest job: status, logs, model and checkpoints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared import storage

from ddpjob import checkpoint_store
from ddpjob.analytics import TrainingJobAnalytics
from ddpjob.base_session import BaseSession
from ddpjob.errors import UserInputError
from ddpjob.training_job import TrainingJob

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.tuning.trial_checkpoints import TrialCheckpoints


class JobResults:
    """Mixin of `Estimator`: reads `session`, `latest_training_job` and `checkpoint_s3_uri`."""

    session: BaseSession
    latest_training_job: TrainingJob | None
    checkpoint_s3_uri: str | None
    #: Set by `HyperparameterTuner.best_estimator()`: the checkpoints are the trial's own among
    #: those its tuning job's trials share (`tuning.trial_checkpoints`); None: every checkpoint
    #: under checkpoint_s3_uri.
    trial_checkpoints: TrialCheckpoints | None = None

    def _job(self) -> TrainingJob:
        if self.latest_training_job is None:
            raise UserInputError("no training job yet: call fit() or attach() first")
        return self.latest_training_job

    def describe(self) -> dict[str, Any]:
        """DescribeTrainingJob of the latest job."""
        return self._job().describe()

    def logs(self) -> None:
        """Print every log line of the latest job so far, each prefixed with its host."""
        self._job().logs()

    def stop(self) -> None:
        """Stop the latest job."""
        self._job().stop()

    def stacks(self) -> None:
        """Print every rank's Python stacks of the latest job while it runs, headed by host and
        rank, naming the ranks that wait in a collective and those elsewhere (local jobs only;
        `session.stacks(job_name)` returns the text)."""
        print(self.session.stacks(self._job().name), end="", flush=True)

    @property
    def model_data(self) -> str | None:
        """URI of the latest job's model.tar.gz (where it is, or will be once Completed)."""
        return self.session.describe(self._job().name).model_artifacts

    @property
    def training_job_analytics(self) -> TrainingJobAnalytics:
        """The latest job's `TrainingJobAnalytics`, as in the official SDK: its `dataframe()`
        holds the series of its MetricDefinitions, rows `timestamp` (seconds since training
        started), `metric_name`, `value`."""
        return TrainingJobAnalytics(self._job().name, sagemaker_session=self.session)

    def download_model(self, local_dir: str | os.PathLike) -> Path:
        """Download the latest job's model.tar.gz into `local_dir`; return the file's path."""
        uri = self.model_data
        if not uri:
            raise UserInputError(f"training job {self._job().name} has no model yet (status "
                                 f"{self.session.describe(self._job().name).status})")
        return storage.download_file(uri, Path(local_dir).expanduser() / Path(uri).name,
                                     progress=True)

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint_uri(self) -> str:
        if not self.checkpoint_s3_uri:
            raise UserInputError("checkpoint_s3_uri is not set for this estimator; pass "
                                 "checkpoint_s3_uri='s3://bucket/prefix' (or file:// locally)")
        return self.checkpoint_s3_uri

    def checkpoints(self) -> list[checkpoint_store.Checkpoint]:
        """The complete checkpoints under checkpoint_s3_uri (step, time, uri), oldest first (a
        tuning trial's: its own, `HyperparameterTuner.best_estimator`)."""
        if self.trial_checkpoints is not None:
            return self.trial_checkpoints.checkpoints()
        return checkpoint_store.list_checkpoints(self._checkpoint_uri())

    def download_checkpoint(self, local_dir: str | os.PathLike, step: int | None = None) -> Path:
        """Download a complete checkpoint (the latest when `step` is None) of `checkpoints()`
        into `local_dir`; return its folder (`<local_dir>/step-000000100`)."""
        return checkpoint_store.download_checkpoint(self._checkpoint_uri(), local_dir, step,
                                                    self.checkpoints())
