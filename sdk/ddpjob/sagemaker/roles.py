"""Which roles SageMaker jobs can be given: an IAM role ARN or a role name (the registry's
`SAGEMAKER.role_check`; light, so the CLI and config check a role without importing boto3)."""

from __future__ import annotations

import re

from ddpjob.errors import UserInputError

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/\S+$")
_ROLE_NAME = re.compile(r"^[\w+=,.@/-]{1,512}$")

ROLE_REQUIRED = (
    "role is required for SageMaker jobs: pass role='arn:aws:iam::<account>:role/<name>' "
    "(an IAM role that SageMaker can assume), or set role in ~/.ddpjob/config.yaml")


def require_role(role: str | None) -> str:
    """Return `role` when it looks like an IAM role ARN or name; else raise UserInputError."""
    if not role or not isinstance(role, str):
        raise UserInputError(ROLE_REQUIRED)
    if role.startswith("arn:"):
        if not _ROLE_ARN.match(role):
            raise UserInputError(f"role {role!r} is not an IAM role ARN: use "
                                 f"'arn:aws:iam::<12-digit account>:role/<name>'")
    elif not _ROLE_NAME.match(role):
        raise UserInputError(f"role {role!r} is neither an IAM role ARN nor a role name: use "
                             f"'arn:aws:iam::<account>:role/<name>'")
    return role
