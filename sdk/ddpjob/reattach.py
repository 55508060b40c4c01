"""DescribeTrainingJob -> the estimator's constructor arguments (the official SDK's
`_prepare_init_params_from_job_description`): what `attach` passes to the constructor."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.hyperparameters import decode, is_reserved

from ddpjob import arguments
from ddpjob.distribution import NAMES as DISTRIBUTION_NAMES
from ddpjob.distribution import distribution_from_hyperparameters


def _user_hyperparameter(name: str) -> bool:
    return not is_reserved(name) and name not in DISTRIBUTION_NAMES


def init_params_from_description(description: Mapping[str, Any],
                                 local_image: str) -> dict[str, Any]:
    """Constructor arguments that rebuild the estimator of this job (its code is the stored
    archive, `source_dir=<sagemaker_submit_directory>`)."""
    decoded = decode(description.get("HyperParameters") or {})
    resources = description.get("ResourceConfig", {})
    stopping = description.get("StoppingCondition", {})
    image = description.get("AlgorithmSpecification", {}).get("TrainingImage")
    params: dict[str, Any] = {
        "entry_point": decoded.get("sagemaker_program"),
        "source_dir": decoded.get("sagemaker_submit_directory"),
        "hyperparameters": {k: v for k, v in decoded.items() if _user_hyperparameter(k)},
        "instance_type": resources.get("InstanceType"),
        "instance_count": resources.get("InstanceCount", 1),
        "distribution": distribution_from_hyperparameters(decoded),
        "role": description.get("RoleArn"),
        "image_uri": None if image == local_image else image,
        "output_path": description.get("OutputDataConfig", {}).get("S3OutputPath"),
        "environment": dict(description.get("Environment") or {}),
        "max_run": stopping.get("MaxRuntimeInSeconds"),
        "max_wait": stopping.get("MaxWaitTimeInSeconds"),
        "use_spot_instances": bool(description.get("EnableManagedSpotTraining")),
        "max_retry_attempts": (description.get("RetryStrategy") or {}).get(
            "MaximumRetryAttempts"),
        "container_log_level": decoded.get("sagemaker_container_log_level", logging.INFO),
        "checkpoint_s3_uri": (description.get("CheckpointConfig") or {}).get("S3Uri"),
        **arguments.from_description(description),
    }
    return {name: value for name, value in params.items() if value is not None}
