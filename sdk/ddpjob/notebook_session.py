"""The official SageMaker SDK's session methods a notebook calls around the estimator.

`NotebookConveniences` is mixed into every session (`BaseSession`): it only calls the session's
scheduler (`describe`, `stop`) and policy (`backend`, `resolve_role`, `region_name`) and adds
nothing a job needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared import storage

from ddpjob import bucket_data, job_wait
from ddpjob.errors import UserInputError
from ddpjob.job_status import JobDescription

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.backends import Backend


class NotebookConveniences:
    """`default_bucket`, `upload_data`, `download_data`, `describe_training_job`,
    `stop_training_job`, `wait_for_job`, `logs_for_job`, `execution_role` of a session."""

    if TYPE_CHECKING:  # the session this is mixed into provides them
        region_name: str | None
        backend: Backend

        def describe(self, job_name: str) -> JobDescription: ...
        def stop(self, job_name: str) -> None: ...
        def resolve_role(self, role: str | None) -> str: ...

    def default_bucket(self) -> str:
        """The name of the bucket for data, code and outputs when none is named (made when
        missing); a backend without one refuses (UserInputError)."""
        raise UserInputError(f"{self.backend.label} sessions have no default bucket: name a "
                             f"bucket (upload_data(path, bucket=...))")

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
                    callback: object = None, extra_args: dict[str, Any] | None = None) -> str:
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
        return dict(self.describe(job_name).raw)

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
