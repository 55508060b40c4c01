"""Jobs made by the official SageMaker Python SDK v2 run unchanged on our local backend.

Two ways in, both with the real `sagemaker` package and moto in server mode:
1. the official SDK's own `sagemaker.local.LocalSession`, its `sagemaker_client` replaced by
   `ddpjob.LocalSession().sagemaker_client`: `PyTorch(...).fit()` runs on our runtime;
2. the CreateTrainingJob request the official SDK sent to (moto's) SageMaker for a real instance
   type, replayed to our client with only `ResourceConfig.InstanceType` changed to "local".
"""

from __future__ import annotations

import copy
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.control import validation
from ddpjob.local.session import LocalSession
from ddpjob_runtime.job import launcher
from ddpjob_runtime.platform import environment

from tests.conftest import REGION
from tests.interop.conftest import IMAGE_URI, ROLE, SDK_CONFIG, TRAIN_SCRIPT, boto_session
from tests.local.conftest import assert_no_processes, log_text, wait_until_ended

pytestmark = pytest.mark.slow

DISTRIBUTIONS = {
    "torch_distributed": {"torch_distributed": {"enabled": True}},
    "pytorchddp": {"pytorchddp": {"enabled": True}},
    "smdistributed": {"smdistributed": {"dataparallel": {"enabled": True}}},
}
# The launcher flag the official SDK (2.257) sets for each form: it rewrites "pytorchddp" into
# "smdistributed.dataparallel" before making the request.
FLAGS = {
    "torch_distributed": "sagemaker_torch_distributed_enabled",
    "pytorchddp": "sagemaker_distributed_dataparallel_enabled",
    "smdistributed": "sagemaker_distributed_dataparallel_enabled",
}


def _estimator(sdk_session: Any, source_dir: Path, **kwargs: Any) -> Any:
    from sagemaker.pytorch import PyTorch

    return PyTorch(
        entry_point=TRAIN_SCRIPT.name,
        source_dir=str(source_dir),
        role=ROLE,
        image_uri=IMAGE_URI,
        sagemaker_session=sdk_session,
        **kwargs,
    )


def _capture_create_requests(sdk_session: Any) -> list[dict[str, Any]]:
    """Every CreateTrainingJob request the SDK's boto3 client is asked to send, as sent."""
    sent: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append(copy.deepcopy(params))

    events = sdk_session.sagemaker_client.meta.events
    events.register("before-parameter-build.sagemaker.CreateTrainingJob", record)
    return sent


def _model_tar(uri: str) -> dict[str, bytes]:
    """The files of a model.tar.gz on (moto's) S3."""
    import boto3

    assert uri.startswith("s3://"), uri
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"]
    with tarfile.open(fileobj=io.BytesIO(body.read())) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _check_result(members: dict[str, bytes], *, world: int, hosts: list[str], tag: str,
                  flag: str) -> dict[str, Any]:  # fmt: skip
    assert set(members) == {"result.json"}, sorted(members)
    result = json.loads(members["result.json"])
    assert result["world_size"] == world
    assert result["hosts"] == hosts and result["current_host"] == "algo-1"
    assert result["tag"] == tag
    assert result["framework_params"][flag] is True
    assert result["final_loss"] == result["final_loss"]  # not NaN
    return result


def test_official_local_session_with_our_client_runs_torch_distributed_on_two_hosts(
    sdk: Any, aws_env: str, s3_bucket: str, local_session: LocalSession, source_dir: Path
) -> None:
    """`PyTorch(instance_type="local", instance_count=2, torch_distributed).fit()` on our client.

    The SDK stages sourcedir.tar.gz in the session's default bucket on moto's S3, our hosts
    fetch it from there, torchrun runs 2 hosts x 1 worker, the model goes back to moto, and the
    SDK's own wait and `model_data` read our DescribeTrainingJob. (The SDK's `fit()` with
    logs would not wait: its LocalSession's `logs_for_job` is a no-op, so we wait ourselves.)
    """
    from sagemaker.local import LocalSession as SdkLocalSession

    sdk_session = SdkLocalSession(
        boto_session=boto_session(aws_env), default_bucket=s3_bucket, sagemaker_config=SDK_CONFIG
    )
    sdk_session.config = {"local": {"local_code": False}}  # the default: code goes to S3
    sdk_session.sagemaker_client = local_session.sagemaker_client
    estimator = _estimator(
        sdk_session, source_dir,
        instance_count=2, instance_type="local",
        distribution=DISTRIBUTIONS["torch_distributed"],
        hyperparameters={"expected-world-size": 2, "tag": "sdk-local-mode", "steps": 3},
    )  # fmt: skip
    estimator.fit(wait=False)  # the SDK's wait has no deadline: ours first, then the SDK's
    name = estimator.latest_training_job.name

    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    estimator.latest_training_job.wait(logs="None")  # the SDK's wait_for_job: raises if not OK

    request = json.loads((local_session.job_dir(name) / "request.json").read_text())
    assert request["AlgorithmSpecification"]["TrainingImage"] == IMAGE_URI
    assert request["ResourceConfig"]["InstanceCount"] == 2
    # The session's default bucket (moto) holds the code and, as output_path, the model.
    source = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
    assert source == f"s3://{s3_bucket}/{name}/source/sourcedir.tar.gz"

    model_data = estimator.model_data
    assert model_data == f"s3://{s3_bucket}/{name}/output/model.tar.gz"
    result = _check_result(
        _model_tar(model_data), world=2, hosts=["algo-1", "algo-2"], tag="sdk-local-mode",
        flag=FLAGS["torch_distributed"],
    )  # fmt: skip
    assert result["local_world_size"] == 1
    assert result["user_args"] == [
        "--expected-world-size", "2", "--steps", "3", "--tag", "sdk-local-mode"
    ]  # fmt: skip
    assert "rank 0 of 2 wrote result.json" in log_text(local_session, name, "algo-1")
    assert (local_session.job_dir(name) / "logs" / "algo-2.log").stat().st_size > 0
    assert_no_processes(local_session.home)


def test_create_training_job_request_of_the_official_sdk_runs_locally(
    sdk: Any, aws_env: str, local_session: LocalSession, source_dir: Path, s3_bucket: str
) -> None:
    """The request `PyTorch(instance_type="ml.m5.xlarge", pytorchddp).fit()` sent to moto's
    SageMaker runs on our client once InstanceType is "local": 1 host x 2 workers."""
    sdk_session = sdk.Session(boto_session=boto_session(aws_env), sagemaker_config=SDK_CONFIG)
    sent = _capture_create_requests(sdk_session)
    estimator = _estimator(
        sdk_session, source_dir,
        instance_count=1, instance_type="ml.m5.xlarge",
        distribution=DISTRIBUTIONS["pytorchddp"],
        output_path=f"s3://{s3_bucket}/output",
        hyperparameters={
            "expected-world-size": 2, "tag": "replayed", "ddpjob_processes_per_host": 2,
        },
    )  # fmt: skip
    estimator.fit(wait=False)
    assert len(sent) == 1
    request = sent[0]
    name = request["TrainingJobName"]
    in_moto = sdk_session.sagemaker_client.describe_training_job(TrainingJobName=name)
    assert in_moto["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert request["HyperParameters"][FLAGS["pytorchddp"]] == "true"
    assert request["HyperParameters"]["ddpjob_processes_per_host"] == "2"

    local_request = copy.deepcopy(request)
    local_request["ResourceConfig"]["InstanceType"] = "local"
    local_session.sagemaker_client.create_training_job(**local_request)
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")

    stored = json.loads((local_session.job_dir(name) / "request.json").read_text())
    assert stored == json.loads(json.dumps(local_request))  # kept as sent, nothing dropped
    model_data = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert model_data == f"s3://{s3_bucket}/output/{name}/output/model.tar.gz"
    result = _check_result(
        _model_tar(model_data), world=2, hosts=["algo-1"], tag="replayed",
        flag=FLAGS["pytorchddp"],
    )  # fmt: skip
    assert result["local_world_size"] == 2
    assert "ddpjob_processes_per_host" not in json.dumps(result["user_args"])
    assert "rank 0 of 2 wrote result.json" in log_text(local_session, name, "algo-1")
    assert_no_processes(local_session.home)


@pytest.mark.parametrize("form", sorted(DISTRIBUTIONS))
def test_every_distribution_form_makes_a_request_local_mode_takes(
    sdk: Any, aws_env: str, s3_bucket: str, source_dir: Path, form: str
) -> None:
    """Each `distribution` form: moto takes the SDK's request, our checks take it with
    InstanceType "local", and our runtime launches it with torchrun (no job is run here)."""
    sdk_session = sdk.Session(boto_session=boto_session(aws_env), sagemaker_config=SDK_CONFIG)
    sent = _capture_create_requests(sdk_session)
    _estimator(
        sdk_session, source_dir,
        instance_count=2, instance_type="ml.m5.xlarge", distribution=DISTRIBUTIONS[form],
        output_path=f"s3://{s3_bucket}/output", hyperparameters={"expected-world-size": 2},
    ).fit(wait=False)  # fmt: skip
    (request,) = sent
    request["ResourceConfig"]["InstanceType"] = "local"
    validation.check_shape("CreateTrainingJob", request)
    validation.check_create(request)
    hyperparameters = environment.decode_hyperparameters(request["HyperParameters"])
    assert hyperparameters[FLAGS[form]] is True
    assert launcher.choose_strategy(hyperparameters) is launcher.Strategy.TORCHRUN


def test_official_local_mode_with_local_code_runs_smdistributed_without_s3(
    sdk: Any, aws_env: str, local_session: LocalSession, source_dir: Path
) -> None:
    """With the SDK's `local_code` setting the source folder is handed over as file:// and no
    output_path means S3OutputPath "": our client keeps the artifacts under its home. Nothing
    goes to S3 (the session has no default bucket: looking one up would call AWS's STS, which
    `boto_session` refuses)."""
    from sagemaker.local import LocalSession as SdkLocalSession

    sdk_session = SdkLocalSession(boto_session=boto_session(aws_env), sagemaker_config=SDK_CONFIG)
    sdk_session.config = {"local": {"local_code": True}}
    sdk_session.sagemaker_client = local_session.sagemaker_client
    estimator = _estimator(
        sdk_session, source_dir,
        instance_count=2, instance_type="local", distribution=DISTRIBUTIONS["smdistributed"],
        hyperparameters={"expected-world-size": 2, "tag": "local-code"},
    )  # fmt: skip
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")

    request = json.loads((local_session.job_dir(name) / "request.json").read_text())
    hyperparameters = environment.decode_hyperparameters(request["HyperParameters"])
    assert hyperparameters["sagemaker_submit_directory"] == f"file://{source_dir}"
    output = f"{local_session.default_output_path()}/{name}/output"
    assert estimator.model_data == f"{output}/model.tar.gz"
    with tarfile.open(Path(f"{output}/model.tar.gz".removeprefix("file://"))) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    result = _check_result(
        members, world=2, hosts=["algo-1", "algo-2"], tag="local-code",
        flag=FLAGS["smdistributed"],
    )  # fmt: skip
    assert result["steps"] == 3  # the script's default: no --steps was given
    assert_no_processes(local_session.home)


def test_a_failing_script_fails_the_official_sdks_wait_with_our_reason(
    sdk: Any, aws_env: str, s3_bucket: str, local_session: LocalSession, source_dir: Path
) -> None:
    """The SDK's wait raises its UnexpectedStatusException carrying our FailureReason."""
    from sagemaker.exceptions import UnexpectedStatusException
    from sagemaker.local import LocalSession as SdkLocalSession
    from sagemaker.pytorch import PyTorch

    (source_dir / "fail.py").write_text("raise ValueError('boom from the user script')\n")
    sdk_session = SdkLocalSession(
        boto_session=boto_session(aws_env), default_bucket=s3_bucket, sagemaker_config=SDK_CONFIG
    )
    sdk_session.config = {"local": {"local_code": False}}
    sdk_session.sagemaker_client = local_session.sagemaker_client
    estimator = PyTorch(
        entry_point="fail.py", source_dir=str(source_dir), role=ROLE, image_uri=IMAGE_URI,
        instance_count=1, instance_type="local", sagemaker_session=sdk_session,
    )  # fmt: skip
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Failed"
    with pytest.raises(UnexpectedStatusException) as error:
        estimator.latest_training_job.wait(logs="None")
    assert "ValueError: boom from the user script" in str(error.value)
    assert job["FailureReason"] in str(error.value)
    assert_no_processes(local_session.home)
