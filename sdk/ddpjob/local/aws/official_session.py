"""`LocalSession().official_session()`: the official SDK's own session, answered by this machine.

The session is the installed official SDK's (v3: `sagemaker.core.helper.session_helper.Session`,
v2: `sagemaker.Session`) around a real `boto3.Session` whose botocore event system answers, in
`before-call` handlers, what that SDK sends to AWS for a training job; botocore then skips the
HTTP request and takes the handler's answer as AWS's (an error as the `ClientError` AWS's would
be). This module is the edge that promises AWS's shapes:

- SageMaker: Create/Describe/Stop/Update/ListTrainingJobs, the tuning jobs' six calls and
  ListTags by the local backend's client, after the backend's own refusals
  (`local.refusals.check_request`, then the client's checks);
- CloudWatch Logs (`logs=True`): the hosts' log files (`log_streams`); logs of jobs this home
  does not hold go to AWS, as the SDK would have sent them;
- STS GetCallerIdentity and IAM GetRole / SimulatePrincipalPolicy: a local account
  (`000000000000`) whose role `ddpjob-local` may do everything;
- S3 of the bucket `sagemaker-local` (the session's default bucket): its folder under the home,
  with S3's answers and errors (`bucket_api`); other buckets are real S3 (or
  `AWS_ENDPOINT_URL`'s).

Any other operation of those services, or of any other service but S3, is refused with one line
instead of leaving the machine. Credentials are never looked up from an instance or container
metadata service, telemetry is off in the SDK's config, and the region is boto's configured one,
else us-east-1.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared.storage.uris import LOCAL_BUCKET

from ddpjob import backends, official_sdk
from ddpjob.local.aws.bucket_api import Answer, LocalBucket, error
from ddpjob.local.aws.log_streams import JobLogStreams

if TYPE_CHECKING:  # pragma: no cover
    import boto3
    from botocore.hooks import BaseEventHooks

    from ddpjob.local.session import LocalSession

ACCOUNT = backends.LOCAL.default_role.split(":")[4]  # the local account, LocalSession's role's
ROLE_NAME = backends.LOCAL.default_role.rsplit("/", 1)[1]
DEFAULT_REGION = "us-east-1"
NEEDED_FOR = "LocalSession().official_session()"
#: The official SDK's defaults config: telemetry off, and no config file or S3 location read.
SDK_CONFIG: dict[str, Any] = {
    "SchemaVersion": "1.0",
    "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}},
}
_PARAMS = "ddpjob_api_params"  # where the request's API parameters wait for `before-call`
#: What the local backend's boto3-shaped client answers as it is.
_CLIENT_CALLS = {("sagemaker", op) for op in (
    "DescribeTrainingJob", "StopTrainingJob", "UpdateTrainingJob", "ListTrainingJobs",
    "CreateHyperParameterTuningJob", "DescribeHyperParameterTuningJob",
    "StopHyperParameterTuningJob", "ListTrainingJobsForHyperParameterTuningJob",
    "ListHyperParameterTuningJobs", "DeleteHyperParameterTuningJob", "ListTags")}


def _ok(parsed: dict[str, Any]) -> Answer:
    return 200, parsed


class Answers:
    """What this machine answers for each service and operation (botocore `before-call`)."""

    def __init__(self, local: LocalSession, region: str):
        self.local = local
        self.bucket = LocalBucket(local.sagemaker_client.bucket_root, region)
        self.logs = JobLogStreams(local.sagemaker_client.control)

    def register(self, events: BaseEventHooks) -> None:
        """Answer through `events` (a boto3 session's, before any client of it is made)."""
        events.register_last("before-parameter-build", self._keep_params)
        events.register("before-call", self._answer)

    @staticmethod
    def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_PARAMS] = params

    def _answer(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import ClientError

        service, operation = model.service_model.service_name, model.name
        params = context.get(_PARAMS) or {}
        handler = self._handler(service, operation, params)
        if handler is None:
            return None  # sent as usual
        try:
            status, parsed = handler(params)
        except ClientError as exc:  # the local client's answer, as AWS's
            status, parsed = exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response
        metadata = {"HTTPStatusCode": status, "HTTPHeaders": {}, "RetryAttempts": 0,
                    "RequestId": "ddpjob-local"}
        return AWSResponse("", status, {}, None), {**parsed, "ResponseMetadata": metadata}

    def _handler(self, service: str, operation: str, params: dict[str, Any]) -> Any:
        """The answering function, or None for a request that goes where boto sends it."""
        import botocore

        if service == "s3":
            if params.get("Bucket") != LOCAL_BUCKET and operation != "ListBuckets":
                return None
            found = self.bucket.handler(operation)
        elif service == "logs":
            if not self.logs.knows(self.logs.job_of(params)):
                return None
            found = getattr(self.logs, botocore.xform_name(operation), None)
        elif (service, operation) in _CLIENT_CALLS:
            method = getattr(self.local.sagemaker_client, botocore.xform_name(operation))
            return lambda params: _ok(method(**params))
        else:
            found = {
                ("sagemaker", "CreateTrainingJob"): self._create_training_job,
                ("sts", "GetCallerIdentity"): self._caller_identity,
                ("iam", "GetRole"): self._role,
                ("iam", "SimulatePrincipalPolicy"): self._simulate,
            }.get((service, operation))
        return found or (lambda _: _refused(service, operation))

    # --- SageMaker -----------------------------------------------------------------------

    def _create_training_job(self, params: dict[str, Any]) -> Answer:
        """CreateTrainingJob after the backend's refusals (one UserInputError line)."""
        from ddpjob.local.control import refusals

        refusals.check_request(params)
        return _ok(self.local.sagemaker_client.create_training_job(**params))

    # --- identity --------------------------------------------------------------------------

    @staticmethod
    def _caller_identity(params: dict[str, Any]) -> Answer:
        return _ok({"UserId": f"AROA{ACCOUNT}:ddpjob", "Account": ACCOUNT,
                    "Arn": f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE_NAME}/ddpjob"})

    @staticmethod
    def _role(params: dict[str, Any]) -> Answer:
        name = params["RoleName"]
        return _ok({"Role": {
            "Path": "/", "RoleName": name, "RoleId": f"AROA{ACCOUNT}{len(name)}",
            "Arn": f"arn:aws:iam::{ACCOUNT}:role/{name}",
            "CreateDate": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc),
        }})

    @staticmethod
    def _simulate(params: dict[str, Any]) -> Answer:
        resources = params.get("ResourceArns") or ["*"]
        return _ok({"IsTruncated": False, "EvaluationResults": [
            {"EvalActionName": action, "EvalResourceName": resource, "EvalDecision": "allowed"}
            for action in params["ActionNames"] for resource in resources]})


def _refused(service: str, operation: str) -> Answer:
    return error(400, "UnknownOperationException",
                 f"{service} {operation} is not answered on this machine: "
                 f"{NEEDED_FOR} runs training jobs here (create, describe, stop, update, list, "
                 f"their logs, the local bucket), nothing else")


def region() -> str:
    """The region boto is configured with (AWS_DEFAULT_REGION, ~/.aws/config), else us-east-1."""
    import botocore.session

    return botocore.session.get_session().get_config_variable("region") or DEFAULT_REGION


def boto_session(local: LocalSession) -> boto3.Session:
    """A boto3 session whose requests this machine answers (see the module's docstring)."""
    import boto3
    import botocore.session

    core = botocore.session.Session()
    resolver = core.get_component("credential_provider")
    for name in ("container-role", "iam-role"):  # no metadata service is ever asked
        resolver.remove(name)
    session = boto3.Session(botocore_session=core, region_name=region())
    Answers(local, session.region_name).register(session.events)
    return session


def official_session(local: LocalSession) -> Any:
    """The installed official SDK's session (v3 or v2) whose AWS requests `local` answers."""
    sdk = official_sdk.require(NEEDED_FOR)
    boto = boto_session(local)
    if sdk.major == 3:
        session_class = sdk.module("helper.session_helper").Session
        _answer_v3_job_logs(boto, sdk.module("utils.logs").CloudWatchLogsClient)
    else:
        session_class = sdk.module("session").Session
    local.default_bucket()  # the folder exists
    return session_class(boto_session=boto, default_bucket=LOCAL_BUCKET,
                         sagemaker_config=SDK_CONFIG)


def _answer_v3_job_logs(boto: boto3.Session, logs: Any) -> None:
    """v3's TrainingJob.wait(logs=True) reads logs through one CloudWatch Logs client per
    process (`logs`, a singleton class), made from a default boto3 session whatever session the
    job has: make it one of `boto`'s, which answers local jobs' logs and sends the others' to
    AWS."""
    from botocore.config import Config

    client = boto.client("logs", config=Config(retries={"max_attempts": 10, "mode": "standard"}))
    logs.client = client  # the class default: a first instance makes no client of its own
    logs().client = client
