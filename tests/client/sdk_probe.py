"""What ddpjob makes of the official SDK of the environment it runs in, as JSON on stdout.

Builds the request of an `ml.g5.12xlarge` PyTorch job with no `image_uri` and no versions (a
dry run: nothing is sent, the credentials are dummies), then reports the SDK found, the default
versions, the image, and which `sagemaker*` modules got imported on the way::

    python tests/client/sdk_probe.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def main() -> None:
    """Print the probe's JSON."""
    os.environ.update(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="probe",
                      AWS_SECRET_ACCESS_KEY="probe")
    from ddpjob import PyTorch, Session, image_uris, official_sdk

    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "train.py").write_text("print('hello')\n")
        estimator = PyTorch(entry_point="train.py", source_dir=folder, instance_count=2,
                            role="arn:aws:iam::123456789012:role/SageMakerRole",
                            instance_type="ml.g5.12xlarge", output_path="s3://probe-bucket/out",
                            sagemaker_session=Session())
        request = estimator.training_job_request(job_name="probe-1")
    sdk = official_sdk.installed()
    print(json.dumps({
        "major": sdk and sdk.major, "version": sdk and sdk.version,
        "registry": sdk and str(sdk.registry), "default": image_uris.default_versions(),
        "image": request["AlgorithmSpecification"]["TrainingImage"],
        "loaded": sorted(name for name in sys.modules if name.startswith("sagemaker")),
    }))


if __name__ == "__main__":
    main()
