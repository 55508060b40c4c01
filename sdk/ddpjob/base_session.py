"""The small surface every control plane offers, so the estimator asks instead of branching.

A session is a scheduler in TorchX's sense: it owns its policy (instance types, image, role,
default locations, where local inputs go, how often to poll), checks a request without any side
effect (`submit_dryrun`), and `submit` is that dry run, then reserving the name, staging the
job's files and scheduling it. Reading a job (`describe`, `list`, `logs`) never changes it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ddpjob_runtime import storage

from ddpjob import bucket_data, job_wait
from ddpjob.errors import UserInputError
from ddpjob.naming import check_job_name
from ddpjob.training_job import TrainingJob

#: What `submit` calls between reserving the job name and scheduling the job (uploads).
Stage = Callable[[], None]


class BaseSession(abc.ABC):
    """A control plane for training jobs: SageMaker (`Session`) or this machine (`LocalSession`)."""

    #: Seconds between two looks at a job that is being followed.
    poll_seconds: float = 5.0
    #: URI schemes this backend's hosts can read and write ("s3", "file").
    storage_schemes: frozenset[str] = frozenset({"s3"})
    #: What the backend's jobs are called in messages ("SageMaker", "local").
    label: str = "SageMaker"

    # --- policy ------------------------------------------------------------------------------

    @property
    def region_name(self) -> str | None:
        """The AWS region the session talks to, when there is one."""
        return None

    @abc.abstractmethod
    def check_instance_type(self, instance_type: str) -> None:
        """Raise UserInputError unless this backend runs `instance_type`."""

    @abc.abstractmethod
    def training_image(self, image_uri: str | None) -> str:
        """The TrainingImage of a job given the estimator's `image_uri` (UserInputError when this
        backend needs one and none is given)."""

    @abc.abstractmethod
    def resolve_role(self, role: str | None) -> str:
        """The RoleArn of a job given the estimator's `role` (UserInputError when required)."""

    @abc.abstractmethod
    def default_output_path(self) -> str:
        """Where outputs go when the estimator names no `output_path` (a folder URI). Pure: a
        default bucket is created only when a job that uses it is submitted."""

    @abc.abstractmethod
    def input_prefix(self, job_name: str) -> str | None:
        """Where local input data of `job_name` is uploaded; None: the hosts read it in place."""

    def check_location(self, uri: str, argument: str) -> str:
        """`uri` as this backend's requests name it; UserInputError unless its hosts can reach
        the folder URI `uri`."""
        scheme = "s3" if uri.startswith("s3://") else "file"
        if scheme not in self.storage_schemes:
            allowed = " or ".join(f"{s}://" for s in sorted(self.storage_schemes))
            raise UserInputError(f"{argument} {uri!r}: {self.label} jobs need an {allowed} URI")
        return uri

    # --- jobs --------------------------------------------------------------------------------

    @abc.abstractmethod
    def submit_dryrun(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The CreateTrainingJob request as this backend would send it, checked; changes
        nothing anywhere (no bucket, no name, no upload)."""

    def submit(self, request: Mapping[str, Any], stage: Stage | None = None) -> TrainingJob:
        """Check `request`, reserve its job name, run `stage` (the uploads), then start the job.

        A name that is taken is refused before `stage` runs; when `stage` fails the name is
        given back and nothing is started.
        """
        checked = self.submit_dryrun(request)
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

    def describe(self, job_name: str) -> dict[str, Any]:
        """The DescribeTrainingJob response of `job_name` (JobNotFoundError when there is none)."""
        return self._describe(check_job_name(job_name))

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

    @abc.abstractmethod
    def list(self, max_results: int | None = None, **filters: Any) -> list[dict[str, Any]]:
        """The TrainingJobSummaries that ListTrainingJobs returns for `filters` (e.g.
        NameContains, StatusEquals, SortBy), across pages, at most `max_results` of them."""

    def metric_series(self, job_name: str,
                      metric_names: list[str] | None = None) -> list[dict[str, Any]]:
        """Every `{"timestamp", "metric_name", "value"}` of the metrics `metric_names` (default:
        the job's MetricDefinitions), oldest first, in seconds since its training started."""
        job = self.describe(job_name)
        if metric_names is None:
            definitions = job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or []
            metric_names = [d["Name"] for d in definitions]
        return self._metric_series(job, metric_names)

    @abc.abstractmethod
    def _metric_series(self, job: dict[str, Any],
                       metric_names: list[str]) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    def _describe(self, job_name: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _stop(self, job_name: str) -> None: ...

    @abc.abstractmethod
    def _logs(self, job_name: str, follow: bool) -> Iterator[tuple[str, str]]: ...

    # --- what notebooks call around the estimator (the official SageMaker SDK's names) --------

    @abc.abstractmethod
    def default_bucket(self) -> str:
        """The name of the bucket for data, code and outputs when none is named (made when
        missing)."""

    def _bucket_root(self, bucket: str) -> str:
        """The folder URI that holds the objects of `bucket`."""
        return f"s3://{bucket}/"

    @property
    def boto_region_name(self) -> str | None:
        """The AWS region of the session (the official SDK's name for it)."""
        return self.region_name

    def execution_role(self) -> str:
        """The role that `get_execution_role(session)` answers for this session."""
        return self.resolve_role(None)

    def upload_data(self, path: str, bucket: str | None = None, key_prefix: str = "data",
                    callback: Any = None, extra_args: dict[str, Any] | None = None) -> str:
        """Upload the local file or folder `path` to `bucket` (default: `default_bucket()`).

        As the official SDK: a file becomes `<key_prefix>/<file name>` and its URI is returned;
        a folder's files keep their relative paths under `<key_prefix>`, whose URI is returned.
        `extra_args` are boto3's upload ExtraArgs (e.g. `{"ServerSideEncryption": "aws:kms"}`).
        `callback` is not supported (large transfers show a progress bar).
        """
        if callback is not None:
            raise UserInputError("callback is not supported by upload_data: leave it out "
                                 "(large uploads show a progress bar)")
        bucket = self.default_bucket() if bucket is None else \
            storage.check_bucket_name(bucket, "bucket")
        return bucket_data.upload(path, self._bucket_root(bucket), key_prefix, extra_args)

    def download_data(self, path: str, bucket: str, key_prefix: str = "",
                      extra_args: dict[str, Any] | None = None) -> list[str]:
        """Download the object `key_prefix`, or every object under the folder `key_prefix`, of
        `bucket` into the local folder `path` (relative paths kept); returns the local paths."""
        root = self._bucket_root(storage.check_bucket_name(bucket, "bucket"))
        return bucket_data.download(path, root, key_prefix, extra_args)

    def describe_training_job(self, job_name: str) -> dict[str, Any]:
        """The DescribeTrainingJob response of `job_name`, as the official session returns it."""
        return self.describe(job_name)

    def stop_training_job(self, job_name: str) -> None:
        """Call StopTrainingJob for `job_name` (the official session's name; returns None)."""
        self.stop(job_name)

    def wait_for_job(self, job: str, poll: float = 5) -> dict[str, Any]:
        """Wait until the training job `job` ends, printing its status changes; return its
        description. Raises JobFailedError when it ends Failed (Stopped: a warning)."""
        return job_wait.wait_for_job(self, job, poll)

    def logs_for_job(self, job_name: str, wait: bool = False, poll: float = 10,
                     log_type: bool | str = "All", timeout: float | None = None) -> dict[str, Any]:
        """Print the job's log lines of every host as `[algo-1] line`.

        With `wait`, follow them until the job ends (status changes checked every `poll` s),
        then raise JobFailedError when it Failed; `timeout` (s) ends the wait with
        WaitTimeoutError. `log_type` "All"/"Training" print the lines; "None"/"Rules" do not
        (no Debugger rules run). Returns the job's description.
        """
        return job_wait.logs_for_job(self, job_name, wait, poll, log_type, timeout)
