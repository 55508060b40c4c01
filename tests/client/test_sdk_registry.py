"""The official SDK's registry, read without importing the SDK: found, faithful, and optional.

The main venv holds v2; tests/sdk3 runs the same scripts against v3.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddpjob import official_sdk

from tests.client.scripts import ORACLE, PROBE, REPO, run_script

pytestmark = pytest.mark.interop  # runs the official SDK's own code (in processes of their own)


def test_the_installed_sdk_is_found_as_v2() -> None:
    sdk = official_sdk.installed()
    assert sdk is not None
    assert (sdk.major, sdk.package) == (2, "sagemaker")
    assert sdk.version == importlib.metadata.version("sagemaker")
    assert sdk.config("pytorch")["training"]["versions"]


def test_every_pytorch_and_hugging_face_image_is_the_official_sdks() -> None:
    result = run_script(sys.executable, ORACLE)
    assert result["major"] == 2
    assert result["mismatches"] == [] and result["mismatch_count"] == 0
    assert result["compared"] > 1000 and result["distinct"] > 500  # not a vacuous comparison


def test_a_dlc_request_imports_nothing_of_the_sdk() -> None:
    result = run_script(sys.executable, PROBE)
    version, py_version = result["default"]
    assert result["image"] == ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:"
                               f"{version}-gpu-{py_version}")
    assert result["loaded"] == []


NO_SDK = """\
import os
os.environ.update(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="x",
                  AWS_SECRET_ACCESS_KEY="y")
import json, sys
from ddpjob import PyTorch, Session
from ddpjob.errors import UserInputError

def request(**extra):
    return PyTorch(entry_point="train.py", source_dir=".", instance_count=2,
                   role="arn:aws:iam::123456789012:role/R", instance_type="ml.p4d.24xlarge",
                   output_path="s3://probe-bucket/out", sagemaker_session=Session(), **extra
                   ).training_job_request(job_name="no-sdk-1")

errors = []
for extra in ({}, {"distribution": {"torch_distributed": {"enabled": True}, "smdistributed":
              {"modelparallel": {"enabled": True, "parameters": {"tensor_parallel_degree": 2}}}},
              "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"}):
    try:
        request(**extra)
    except UserInputError as error:
        errors.append(str(error))
own = request(image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1")
print(json.dumps({"errors": errors, "own": own["AlgorithmSpecification"]["TrainingImage"],
                  "sagemaker": [m for m in sys.modules if m.startswith("sagemaker")]}))
"""


def test_without_the_sdk_what_needs_it_says_how_to_install_it(tmp_path: Path) -> None:
    """A real environment without the SDK: this venv's packages but `sagemaker*`, no site."""
    packages = tmp_path / "packages"
    packages.mkdir()
    site = Path(importlib.metadata.distribution("boto3").locate_file(""))
    for entry in site.iterdir():
        if not entry.name.lower().startswith("sagemaker"):
            (packages / entry.name).symlink_to(entry)
    (tmp_path / "train.py").write_text("print('hello')\n")
    (tmp_path / "probe.py").write_text(NO_SDK)
    path = os.pathsep.join([str(REPO / "sdk"), str(REPO / "runtime"), str(packages)])
    done = subprocess.run([sys.executable, "-S", "probe.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ,
                                                                   "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    install = ("needs the official SageMaker SDK (v2 >= 2.200 or v3), which is not installed: "
               "pip install 'ddpjob[sagemaker]' (or pip install sagemaker)")
    assert result["errors"] == [
        f"image_uri not given: picking SageMaker's container (or pass image_uri=...) {install}",
        f"distribution smdistributed.modelparallel {install}"]
    assert result["own"] == "123456789012.dkr.ecr.us-east-1.amazonaws.com/own:1"
    assert result["sagemaker"] == []
