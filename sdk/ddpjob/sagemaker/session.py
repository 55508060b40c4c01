"""`Session`: the SageMaker control plane, through boto3 (jobs, default bucket, CloudWatch logs)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared import storage

from ddpjob import backends
from ddpjob.base_session import BaseSession, Stage
from ddpjob.errors import UserInputError
from ddpjob.job_status import JobDescription, MetricRow
from ddpjob.sagemaker.errors import AwsError, JobNotFoundError, aws_errors, translate_client_error
from ddpjob.sagemaker.execution_role import caller_role
from ddpjob.sagemaker.logs import LogPolling, follow_logs
from ddpjob.sagemaker.roles import require_role

if TYPE_CHECKING:  # pragma: no cover
    import boto3
    from botocore.client import BaseClient

    from ddpjob.config import Config

logger = logging.getLogger(__name__)

# botocore retries throttling and transient errors itself, with backoff; adaptive mode also
# rate-limits this client once it sees throttling (CloudWatch Logs' read APIs allow few TPS).
_RETRIES = {"mode": "standard", "max_attempts": 10}
_LOG_RETRIES = {"mode": "adaptive", "max_attempts": 10}
class Session(BaseSession):
    """Training jobs on Amazon SageMaker: SageMaker provisions the hosts, CloudWatch holds logs."""

    backend = backends.SAGEMAKER

    def __init__(self, boto_session: boto3.Session | None = None,
                 sagemaker_client: BaseClient | None = None, logs_client: BaseClient | None = None,
                 default_bucket: str | None = None, *,
                 log_polling: LogPolling | None = None):
        """Clients default to ones made from `boto_session` (default: `boto3.Session()`).

        `sagemaker_client`'s errors are botocore's (this session's methods translate them);
        `default_bucket` replaces `sagemaker-<region>-<account>`; `log_polling` sets how
        `logs` polls CloudWatch.
        """
        import boto3
        from botocore.config import Config

        self.boto_session = boto_session or boto3.Session()
        region = self.boto_session.region_name or (
            sagemaker_client.meta.region_name if sagemaker_client is not None else None)
        if not region:
            raise UserInputError(
                "No AWS region configured: set AWS_DEFAULT_REGION (e.g. us-east-1), run "
                "`aws configure`, or pass boto_session=boto3.Session(region_name=...)")
        self._region: str = region
        self.sagemaker_client = sagemaker_client or self.boto_session.client(
            "sagemaker", region_name=region, config=Config(retries=_RETRIES))
        self.logs_client = logs_client or self.boto_session.client(
            "logs", region_name=region, config=Config(retries=_LOG_RETRIES))
        self._bucket_override = None if default_bucket is None else \
            storage.check_bucket_name(default_bucket, "default_bucket")
        self._default_bucket: str | None = None
        self._account: str | None = None
        self.log_polling = log_polling or LogPolling()

    @classmethod
    def from_config(cls, config: Config) -> Session:
        """The session of a config file (its region and default bucket)."""
        import boto3

        return cls(boto_session=boto3.Session(region_name=config.region),
                   default_bucket=config.default_bucket)

    @property
    def where(self) -> str:
        """Where this session's jobs are, for messages."""
        return f"SageMaker in {self.region_name}"

    # --- policy ------------------------------------------------------------------------------

    @property
    def region_name(self) -> str:
        """The AWS region of every client of this session."""
        return self._region

    def default_output_path(self) -> str:
        """`s3://<default bucket>/` (the bucket is created when a job that uses it is submitted)."""
        return f"s3://{self.default_bucket_name()}/"

    # --- jobs --------------------------------------------------------------------------------

    def submit_dryrun(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request checked as boto3 checks it before sending (and its role); sends nothing."""
        from ddpjob.request import validate_request

        require_role(request.get("RoleArn"))
        return dict(validate_request(request))

    def _reserve(self, request: dict[str, Any]) -> None:
        """Refuse a name in use before anything is uploaded; create the default bucket when the
        request uses it."""
        self._refuse_name_in_use(request["TrainingJobName"], "training job", self._describe,
                                 "CreateTrainingJob")
        self._create_default_bucket_if_used(request)

    def _refuse_name_in_use(self, name: str, kind: str, describe: Callable[[str], object],
                            operation: str) -> None:
        """ResourceInUse, before anything is uploaded, when `describe(name)` finds a `kind`."""
        try:
            describe(name)
        except JobNotFoundError:
            return
        raise AwsError(f"a {kind} named {name!r} already exists in {self._region}: choose "
                       f"another job_name", code="ResourceInUse", operation=operation)

    def _create_default_bucket_if_used(self, request: Mapping[str, Any]) -> None:
        if f"s3://{self.default_bucket_name()}/" in json.dumps(request):
            self.default_bucket()

    def _schedule(self, request: dict[str, Any]) -> None:
        with aws_errors("CreateTrainingJob", request=request, region=self._region):
            self.sagemaker_client.create_training_job(**request)

    def _metric_series(self, job: JobDescription,
                       metric_names: list[str]) -> list[MetricRow]:
        from ddpjob.sagemaker.metrics import cloudwatch_series

        with aws_errors("GetMetricStatistics", job_name=job.name, region=self._region):
            return cloudwatch_series(
                self.boto_session.client("cloudwatch", region_name=self.region_name), job,
                metric_names)

    def _describe(self, job_name: str) -> dict[str, Any]:
        with aws_errors("DescribeTrainingJob", job_name=job_name, region=self._region):
            return self.sagemaker_client.describe_training_job(TrainingJobName=job_name)

    def _stop(self, job_name: str) -> None:
        with aws_errors("StopTrainingJob", job_name=job_name, region=self._region):
            self.sagemaker_client.stop_training_job(TrainingJobName=job_name)

    def _logs(self, job_name: str, follow: bool) -> Iterator[tuple[str, str]]:
        return follow_logs(self.logs_client, job_name,
                           lambda: self._describe(job_name)["TrainingJobStatus"],
                           follow=follow, polling=self.log_polling, region=self._region)

    def list(self, max_results: int | None = None, **filters: Any) -> list[dict[str, Any]]:
        """See `BaseSession.list`."""
        paging = {"PaginationConfig": {"MaxItems": max_results}} if max_results else {}
        with aws_errors("ListTrainingJobs", region=self._region):
            pages = self.sagemaker_client.get_paginator("list_training_jobs").paginate(
                **filters, **paging)
            return [job for page in pages for job in page["TrainingJobSummaries"]]

    # --- hyperparameter tuning jobs: sagemaker/tuning.py -------------------------------------

    def submit_tuning_job(self, request: Mapping[str, Any], stage: Stage | None = None,
                          lost: Sequence[str] = ()) -> None:
        """See `BaseSession.submit_tuning_job` (`lost` was logged by the tuner: SageMaker keeps
        no diagnostics)."""
        from ddpjob.sagemaker import tuning

        tuning.submit(self, request, stage)

    def describe_tuning_job(self, name: str) -> dict[str, Any]:
        """See `BaseSession.describe_tuning_job`."""
        from ddpjob.sagemaker import tuning

        return tuning.describe(self, name)

    def stop_tuning_job(self, name: str) -> None:
        """See `BaseSession.stop_tuning_job`."""
        from ddpjob.sagemaker import tuning

        tuning.stop(self, name)

    def tuning_job_trials(self, name: str) -> list[dict[str, Any]]:
        """See `BaseSession.tuning_job_trials`."""
        from ddpjob.sagemaker import tuning

        return tuning.trials(self, name)

    # --- account, role and default bucket ----------------------------------------------------

    def account_id(self) -> str:
        """The AWS account of the session's credentials (STS GetCallerIdentity)."""
        if self._account is None:
            sts = self.boto_session.client("sts", region_name=self._region)
            with aws_errors("GetCallerIdentity", region=self._region):
                self._account = sts.get_caller_identity()["Account"]
        return self._account

    def expand_role(self, role: str | None) -> str:
        """The role's ARN: a bare role name becomes `arn:<partition>:iam::<account>:role/<name>`."""
        role = require_role(role)
        if role.startswith("arn:"):
            return role
        partition = self.boto_session.get_partition_for_region(self._region)
        return f"arn:{partition}:iam::{self.account_id()}:role/{role}"

    resolve_role = expand_role

    def default_bucket_name(self) -> str:
        """The bucket for code and outputs: `default_bucket`, or `sagemaker-<region>-<account>`
        (only named here, not created)."""
        return self._bucket_override or f"sagemaker-{self._region}-{self.account_id()}"

    def default_bucket(self) -> str:
        """The default bucket's name, created when missing, as the official SageMaker SDK does.

        A bucket of that name owned by another account is refused rather than written to.
        """
        if self._default_bucket is None:
            name = self.default_bucket_name()
            owner = None if self._bucket_override else self.account_id()  # ours: we chose it
            with aws_errors("HeadBucket", region=self._region):  # offline: one line
                self._ensure_bucket(name, expected_owner=owner)
            self._default_bucket = name
        return self._default_bucket

    def _ensure_bucket(self, name: str, expected_owner: str | None) -> None:
        from botocore.exceptions import ClientError

        s3 = self.boto_session.client("s3", region_name=self._region)
        head: dict[str, Any] = {"Bucket": name}
        if expected_owner:
            head["ExpectedBucketOwner"] = expected_owner  # S3 answers 403 for someone else's
        try:
            s3.head_bucket(**head)
            return
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in ("403", "AccessDenied", "Forbidden"):
                raise UserInputError(
                    f"S3 bucket {name} exists but is not yours or not readable: pass "
                    f"default_bucket=<a bucket you own> (or set default_bucket in the config)"
                ) from error
            if code not in ("404", "NoSuchBucket", "NotFound"):
                raise translate_client_error(error, operation="HeadBucket",
                                             region=self._region) from error
        create: dict[str, Any] = {"Bucket": name}
        if self._region != "us-east-1":  # S3 rejects an explicit us-east-1 location
            create["CreateBucketConfiguration"] = {"LocationConstraint": self._region}
        try:
            s3.create_bucket(**create)
            logger.info("Created S3 bucket %s", name)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "BucketAlreadyExists":
                raise UserInputError(
                    f"S3 bucket name {name} is taken by another account: pass "
                    f"default_bucket=<a bucket you own> (or set default_bucket in the config)"
                ) from error
            # Another process of ours created it meanwhile: fine.
            if code not in ("BucketAlreadyOwnedByYou", "OperationAborted"):
                raise translate_client_error(error, operation="CreateBucket",
                                             region=self._region) from error

    # --- what notebooks call around the estimator --------------------------------------------

    def execution_role(self) -> str:
        """The notebook's (or caller's) role ARN: see `ddpjob.get_execution_role`."""
        return caller_role(self)


def get_execution_role(sagemaker_session: BaseSession | None = None) -> str:
    """The ARN of the IAM role whose credentials call AWS, for `role=` of an estimator.

    As the official SDK's `sagemaker.get_execution_role`: on a SageMaker notebook, its
    execution role. A LocalSession answers its placeholder role (local jobs assume none).
    Raises UserInputError (a ValueError) when the caller is not a role.
    """
    return (Session() if sagemaker_session is None else sagemaker_session).execution_role()
