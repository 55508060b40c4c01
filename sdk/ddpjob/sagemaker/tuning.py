"""Hyperparameter tuning jobs on SageMaker: Create, Describe, Stop and the trials' list through
the session's boto3 client, with the checks and the name reservation a training job gets
(`Session.submit`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpjob.base_session import Stage
from ddpjob.sagemaker.errors import aws_errors
from ddpjob.sagemaker.roles import require_role

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.sagemaker.session import Session

KIND = "hyperparameter tuning job"


def submit(session: Session, request: Mapping[str, Any], stage: Stage | None) -> None:
    """Check `request` (botocore's model, AWS's rules, the role), refuse a name in use, create
    the default bucket when the request uses it, run `stage`, then create the tuning job."""
    from ddpjob.tuning.request import validate_tuning_request

    checked = dict(validate_tuning_request(request))
    require_role((checked.get("TrainingJobDefinition") or {}).get("RoleArn"))
    session._refuse_name_in_use(checked["HyperParameterTuningJobName"], KIND,
                                lambda name: describe(session, name),
                                "CreateHyperParameterTuningJob")
    session._create_default_bucket_if_used(checked)
    if stage is not None:
        stage()
    with aws_errors("CreateHyperParameterTuningJob", request=checked,
                    region=session.region_name):
        session.sagemaker_client.create_hyper_parameter_tuning_job(**checked)


def describe(session: Session, name: str) -> dict[str, Any]:
    """The DescribeHyperParameterTuningJob response (JobNotFoundError when there is none)."""
    with aws_errors("DescribeHyperParameterTuningJob", job_name=name,
                    region=session.region_name, kind=KIND):
        return session.sagemaker_client.describe_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name)


def stop(session: Session, name: str) -> None:
    """StopHyperParameterTuningJob: SageMaker stops the job and its running trials."""
    with aws_errors("StopHyperParameterTuningJob", job_name=name, region=session.region_name,
                    kind=KIND):
        session.sagemaker_client.stop_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name)


def trials(session: Session, name: str) -> list[dict[str, Any]]:
    """Every page of ListTrainingJobsForHyperParameterTuningJob (`tuning.trials`)."""
    from ddpjob.tuning.trials import summaries

    with aws_errors("ListTrainingJobsForHyperParameterTuningJob", job_name=name,
                    region=session.region_name, kind=KIND):
        return summaries(
            session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job, name)
