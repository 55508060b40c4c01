"""The IAM role of the notebook that calls `get_execution_role()`, as the official SDK finds it.

On a SageMaker notebook instance or in Studio the role is in the instance's metadata file (or
its description); elsewhere the caller's identity (STS) is used, an assumed role turned back
into its role ARN (with its IAM path when IAM may be read). An identity that is no role (an IAM
user on a laptop) is one UserInputError telling to pass `role=`.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ddpjob.errors import UserInputError
from ddpjob.sagemaker.errors import aws_errors

if TYPE_CHECKING:  # pragma: no cover
    import boto3
    from botocore.client import BaseClient

logger = logging.getLogger(__name__)

#: Where SageMaker notebook instances and Studio apps describe themselves.
NOTEBOOK_METADATA_FILE = Path("/opt/ml/metadata/resource-metadata.json")
_ASSUMED_ROLE = re.compile(r"^(arn:[^:]+):sts::(\d+):assumed-role/(.+?)/.*$")


class AwsClients(Protocol):
    """What the role is looked up with (a SageMaker `Session`'s clients)."""

    @property
    def boto_session(self) -> boto3.Session: ...
    @property
    def sagemaker_client(self) -> BaseClient: ...
    @property
    def region_name(self) -> str: ...


def _notebook_role(session: AwsClients) -> str | None:
    """The role of the SageMaker notebook instance or Studio user this runs on, if any."""
    from botocore.exceptions import ClientError

    try:
        metadata = json.loads(NOTEBOOK_METADATA_FILE.read_bytes())
    except (OSError, ValueError):
        return None
    if metadata.get("ExecutionRoleArn"):
        return metadata["ExecutionRoleArn"]
    client = session.sagemaker_client
    try:
        if metadata.get("DomainId") is None:
            return client.describe_notebook_instance(
                NotebookInstanceName=metadata.get("ResourceName", ""))["RoleArn"]
        profile = client.describe_user_profile(DomainId=metadata["DomainId"],
                                               UserProfileName=metadata.get("UserProfileName"))
        return (profile.get("UserSettings", {}).get("ExecutionRole")
                or client.describe_domain(DomainId=metadata["DomainId"])
                ["DefaultUserSettings"]["ExecutionRole"])
    except (ClientError, KeyError):
        logger.debug("no role in the notebook's description; using the caller's identity")
        return None


def _with_path(session: AwsClients, role_arn: str, assumed: str) -> str:
    """`role_arn` with the role's IAM path (e.g. service-role/), as IAM has it when readable."""
    from botocore.exceptions import ClientError

    name = role_arn.rsplit("/", 1)[1]
    try:
        return session.boto_session.client("iam").get_role(RoleName=name)["Role"]["Arn"]
    except ClientError:
        if "AmazonSageMaker-ExecutionRole" in assumed:  # the console creates those there
            return _ASSUMED_ROLE.sub(r"\1:iam::\2:role/service-role/\3", assumed)
        logger.warning("Could not read IAM role %s for its path; using %s", name, role_arn)
        return role_arn


def caller_role(session: AwsClients) -> str:
    """The notebook's role, else the caller's (STS) as a role ARN; UserInputError (a ValueError)
    when the caller is not a role. `Session.execution_role` calls this."""
    found = _notebook_role(session)
    if found:
        return found
    sts = session.boto_session.client("sts", region_name=session.region_name)
    with aws_errors("GetCallerIdentity", region=session.region_name):
        arn = sts.get_caller_identity()["Arn"]
    if _ASSUMED_ROLE.match(arn):
        return _with_path(session, _ASSUMED_ROLE.sub(r"\1:iam::\2:role/\3", arn), arn)
    if ":role/" in arn:
        return arn
    raise UserInputError(
        f"get_execution_role(): the current AWS identity {arn} is not a role (this is not a "
        f"SageMaker notebook): pass role='arn:aws:iam::<account>:role/<name>' to the estimator "
        f"(an IAM role that SageMaker can assume), or set role in ~/.ddpjob/config.yaml")
