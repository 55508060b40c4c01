"""The ARNs the local control plane answers with: SageMaker's shapes in a local account."""

from __future__ import annotations

ACCOUNT = "000000000000"
REGION = "local"


def job_arn(name: str) -> str:
    """A local training job's ARN (SageMaker lowers the name in it)."""
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name.lower()}"


def tuning_job_arn(name: str) -> str:
    """A local hyperparameter tuning job's ARN."""
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:hyper-parameter-tuning-job/{name.lower()}"
