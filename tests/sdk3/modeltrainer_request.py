"""The CreateTrainingJob request that the official SDK v3's ModelTrainer sends, as JSON.

Run in the SDK v3 venv (`sdk3_python`) with boto3 pointed at the moto server:
`python modeltrainer_request.py '{"bucket": ..., "source_dir": ..., ...}'`. ModelTrainer uploads
the code and its drivers (channels `code` and `sm_drivers`) to the bucket, then sends
CreateTrainingJob; a botocore handler records that call's parameters and stops it there, so
nothing else answers it. The request is printed on the last line of stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import boto3
from sagemaker.core import image_uris
from sagemaker.core.helper.session_helper import Session
from sagemaker.train import ModelTrainer
from sagemaker.train.configs import CheckpointConfig, Compute, InputData, SourceCode
from sagemaker.train.distributed import Torchrun

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


class Captured(Exception):
    """Raised by the handler once it has the request: nothing is sent."""


def capture_into(found: dict[str, Any]):
    """A `before-parameter-build` handler that keeps CreateTrainingJob's parameters."""
    def handler(params: dict[str, Any], **_: Any) -> None:
        found.update(params)
        raise Captured
    return handler


def main() -> None:
    config = json.loads(sys.argv[1])
    os.environ["SAGEMAKER_VALIDATE_ROLE"] = "false"  # moto has no iam:SimulatePrincipalPolicy
    boto_session = boto3.Session(region_name=REGION)
    found: dict[str, Any] = {}
    boto_session.events.register("before-parameter-build.sagemaker.CreateTrainingJob",
                                 capture_into(found))
    session = Session(boto_session=boto_session, default_bucket=config["bucket"])
    image = image_uris.retrieve("pytorch", region=REGION, version="2.5", py_version="py311",
                                instance_type="ml.m5.xlarge", image_scope="training")
    trainer = ModelTrainer(
        training_image=image, role=ROLE, base_job_name=config.get("base_job_name", "mt"),
        source_code=SourceCode(source_dir=config["source_dir"], entry_script="train.py",
                               requirements=config.get("requirements")),
        compute=Compute(instance_type="ml.m5.xlarge", instance_count=config["instance_count"],
                        keep_alive_period_in_seconds=config.get("keep_alive")),
        distributed=Torchrun(process_count_per_node=config["processes"])
        if config["processes"] else None,
        hyperparameters=config.get("hyperparameters") or {},
        checkpoint_config=CheckpointConfig(s3_uri=config["checkpoint_uri"]),
        sagemaker_session=session,
    )
    with contextlib.suppress(Captured):
        trainer.train(input_data_config=[InputData(channel_name="training",
                                                   data_source=config["data_uri"])],
                      wait=False, logs=False)
    if not found:
        sys.exit("ModelTrainer sent no CreateTrainingJob")
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    main()
