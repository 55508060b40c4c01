"""The argument table: every official argument reaches the request (botocore's model checks it),
attach reads it back, local mode refuses or notes it, and docs/arguments.md's table is the table."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from ddpjob import PyTorch, arguments
from ddpjob.errors import UserInputError

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"
KMS = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
METRICS = [{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}]


def official_objects(bucket: str) -> dict[str, Any]:
    """Arguments given as the official SDK's own objects, as notebooks pass them."""
    from sagemaker.debugger import ProfilerConfig, TensorBoardOutputConfig

    return {
        "tensorboard_output_config": TensorBoardOutputConfig(
            s3_output_path=f"s3://{bucket}/tb", container_local_output_path="/opt/ml/tb"),
        "profiler_config": ProfilerConfig(s3_output_path=f"s3://{bucket}/profile"),
    }


# argument -> (value, request member path, expected value there)
ROW_CASES: list[tuple[str, Any, str, Any]] = [
    ("volume_size", 400, "ResourceConfig.VolumeSizeInGB", 400),
    ("volume_kms_key", KMS, "ResourceConfig.VolumeKmsKeyId", KMS),
    ("keep_alive_period_in_seconds", 600, "ResourceConfig.KeepAlivePeriodInSeconds", 600),
    ("output_kms_key", KMS, "OutputDataConfig.KmsKeyId", KMS),
    ("disable_output_compression", True, "OutputDataConfig.CompressionType", "NONE"),
    ("subnets", ["subnet-0a1b2c3d"], "VpcConfig.Subnets", ["subnet-0a1b2c3d"]),
    ("security_group_ids", ["sg-0a1b2c3d"], "VpcConfig.SecurityGroupIds", ["sg-0a1b2c3d"]),
    ("enable_network_isolation", True, "EnableNetworkIsolation", True),
    ("encrypt_inter_container_traffic", True, "EnableInterContainerTrafficEncryption", True),
    ("metric_definitions", METRICS, "AlgorithmSpecification.MetricDefinitions", METRICS),
    ("enable_sagemaker_metrics", True,
     "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries", True),
    ("input_mode", "FastFile", "AlgorithmSpecification.TrainingInputMode", "FastFile"),
    ("disable_profiler", True, "ProfilerConfig", {"DisableProfiler": True}),
    ("checkpoint_local_path", "/opt/ml/ckpt", "CheckpointConfig.LocalPath", "/opt/ml/ckpt"),
    ("enable_infra_check", True, "InfraCheckConfig.EnableInfraCheck", True),
    ("enable_remote_debug", True, "RemoteDebugConfig.EnableRemoteDebug", True),
    ("training_plan", "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1",
     "ResourceConfig.TrainingPlanArn",
     "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p1"),
]


def read(request: dict[str, Any], path: str) -> Any:
    node: Any = request
    for key in path.split("."):
        node = node[key]
    return node


@pytest.fixture
def make(src: Path, aws_session: Any, s3_bucket: str):
    def build(**extra: Any) -> PyTorch:
        return PyTorch(entry_point="train.py", source_dir=str(src), instance_type="ml.p4d.24xlarge",
                       instance_count=2, role=ROLE, image_uri=IMAGE, session=aws_session,
                       output_path=f"s3://{s3_bucket}/out",
                       checkpoint_s3_uri=f"s3://{s3_bucket}/ckpt",
                       distribution={"torch_distributed": {"enabled": True}}, **extra)
    return build


@pytest.mark.parametrize(("name", "value", "path", "expected"), ROW_CASES,
                         ids=[case[0] for case in ROW_CASES])
def test_row_reaches_the_request(name: str, value: Any, path: str, expected: Any,
                                 make: Any) -> None:
    partner = {"subnets": {"security_group_ids": ["sg-1"]},
               "security_group_ids": {"subnets": ["subnet-1"]}}.get(name, {})
    estimator = make(**{name: value}, **partner)
    request = estimator.training_job_request(job_name="row-1")  # botocore-validated
    assert read(request, path) == expected
    assert getattr(estimator, name) == value


def test_every_row_has_a_case_or_a_dedicated_test() -> None:
    dedicated = {"instance_groups", "tensorboard_output_config", "profiler_config",
                 "debugger_hook_config", "model_uri", "model_channel_name",
                 "enable_session_tag_chaining", "training_repository_access_mode",
                 "training_repository_credentials_provider_arn"}
    assert set(arguments.MEMBERS) == {c[0] for c in ROW_CASES} | dedicated


def test_official_objects_and_switch_offs(make: Any, s3_bucket: str) -> None:
    request = make(debugger_hook_config=False, **official_objects(s3_bucket),
                   model_uri=f"s3://{s3_bucket}/model.tar.gz", model_channel_name="pretrained",
                   enable_session_tag_chaining=True, training_repository_access_mode="Vpc",
                   ).training_job_request(inputs=f"s3://{s3_bucket}/train", job_name="obj-1")
    assert request["TensorBoardOutputConfig"] == {"S3OutputPath": f"s3://{s3_bucket}/tb",
                                                  "LocalPath": "/opt/ml/tb"}
    assert request["ProfilerConfig"]["S3OutputPath"] == f"s3://{s3_bucket}/profile"
    assert "DebugHookConfig" not in request
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == ["training", "pretrained"]
    assert request["InputDataConfig"][1]["ContentType"] == "application/x-sagemaker-model"
    assert request["SessionChainingConfig"] == {"EnableSessionTagChaining": True}
    assert request["AlgorithmSpecification"]["TrainingImageConfig"] == {
        "TrainingRepositoryAccessMode": "Vpc"}


def test_instance_groups_replace_type_and_count(make: Any) -> None:
    from sagemaker.instance_group import InstanceGroup

    request = make(instance_groups=[InstanceGroup("workers", "ml.p4d.24xlarge", 2)]
                   ).training_job_request(job_name="groups-1")
    assert request["ResourceConfig"] == {
        "VolumeSizeInGB": 30,
        "InstanceGroups": [{"InstanceGroupName": "workers", "InstanceType": "ml.p4d.24xlarge",
                            "InstanceCount": 2}]}


def test_v1_names_are_renamed_with_the_official_warning(make: Any) -> None:
    with pytest.warns(DeprecationWarning, match="train_volume_size has been renamed"):
        estimator = make(train_volume_size=77, train_max_run=3600)
    request = estimator.training_job_request(job_name="v1-1")
    assert request["ResourceConfig"]["VolumeSizeInGB"] == 77
    assert request["StoppingCondition"]["MaxRuntimeInSeconds"] == 3600


def test_v1_instance_names(src: Path, aws_session: Any, s3_bucket: str) -> None:
    with pytest.warns(DeprecationWarning, match="train_instance_type has been renamed"):
        estimator = PyTorch(entry_point="train.py", source_dir=str(src), role=ROLE,
                            image_uri=IMAGE, session=aws_session,
                            output_path=f"s3://{s3_bucket}/out",
                            train_instance_type="ml.c5.xlarge", train_instance_count=3)
    assert (estimator.instance_type, estimator.instance_count) == ("ml.c5.xlarge", 3)


def test_ignored_official_arguments_warn(make: Any, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.warns(DeprecationWarning, match="job_name is not an estimator argument"):
        request = make(job_name="ignored", wait=False, model_dir=False, env={"A": "1"}
                       ).training_job_request(job_name="kept-1")
    assert request["TrainingJobName"] == "kept-1"
    assert "Environment" not in request
    assert "model_dir is not an estimator argument" in caplog.text


def test_other_unknown_arguments_are_dropped_with_a_warning_typos_refused(
        make: Any, caplog: pytest.LogCaptureFixture) -> None:
    """As the official SDK's `**kwargs`, but never silently; a near-miss is a typo."""
    with pytest.warns(DeprecationWarning, match="epochs ignored: it is not an estimator"):
        request = make(epochs=3, rules=["a Debugger rule"]).training_job_request(job_name="u-1")
    assert "epochs" not in request["HyperParameters"] and "DebugRuleConfigurations" not in request
    assert "rules ignored: SageMaker Debugger rules are not run by ddpjob jobs" in caplog.text
    with pytest.raises(UserInputError, match=r"'hyperparameter' \(did you mean 'hyperparam"):
        make(hyperparameter={"lr": 1})


def test_attach_parameters_rebuild_the_same_request(make: Any, s3_bucket: str,
                                                    aws_session: Any) -> None:
    original = make(volume_size=100, metric_definitions=METRICS, subnets=["subnet-1"],
                    security_group_ids=["sg-1"], keep_alive_period_in_seconds=300,
                    disable_output_compression=True, checkpoint_local_path="/opt/ml/c",
                    environment={"NCCL_DEBUG": "INFO"}, hyperparameters={"lr": 0.1},
                    max_retry_attempts=2)
    request = original.training_job_request(job_name="same-1")
    params = arguments.from_description(request, "ddpjob-local")
    rebuilt = PyTorch(session=aws_session, **params).training_job_request(job_name="same-1")
    assert rebuilt == request


def test_local_mode_notes_what_has_no_effect(src: Path, local_session: Any,
                                             caplog: pytest.LogCaptureFixture) -> None:
    estimator = PyTorch(entry_point="train.py", source_dir=str(src), session=local_session,
                        volume_size=50, subnets=["subnet-1"], security_group_ids=["sg-1"],
                        metric_definitions=METRICS)
    with caplog.at_level(logging.WARNING):
        estimator.training_job_request(job_name="notes-1")
    assert "volume_size has no effect on this machine" in caplog.text
    assert "subnets has no effect on this machine" in caplog.text
    assert "metric_definitions has no effect" not in caplog.text  # local mode honours it


def test_the_docs_list_the_table() -> None:
    page = Path(__file__).parents[2].joinpath("docs", "arguments.md").read_text()
    assert arguments.markdown_table() in page, "regenerate: python -m ddpjob.arguments"


def test_half_a_vpc_is_refused(make: Any) -> None:
    with pytest.raises(UserInputError, match="subnets and security_group_ids go together"):
        make(subnets=["subnet-1"])


def test_unknown_member_type_is_refused(make: Any) -> None:
    with pytest.raises(UserInputError, match="tensorboard_output_config must be the official"):
        make(tensorboard_output_config="s3://bucket/tb")


def test_a_job_spec_takes_every_estimator_argument() -> None:
    """The CLI's spec keys are the estimators' parameters (a session and SDK objects aside)
    plus every row of the table."""
    import inspect

    from ddpjob import Estimator
    from ddpjob.config import SPEC_ESTIMATOR_KEYS

    parameters = {**inspect.signature(Estimator.__init__).parameters,
                  **inspect.signature(PyTorch.__init__).parameters}
    named = {name for name, p in parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD}
    assert named - {"self", "session", "compiler_config"} == arguments.PARAMETERS
    assert arguments.PARAMETERS | set(arguments.BY_NAME) == SPEC_ESTIMATOR_KEYS


def test_a_debugger_hook_without_output_path_writes_to_the_jobs_output(
        make: Any, s3_bucket: str) -> None:
    """As the official SDK (`_prepare_debugger_for_training`): S3OutputPath defaults to the
    estimator's output_path, and the rest of the hook config is kept."""
    from sagemaker.debugger import DebuggerHookConfig

    hook = DebuggerHookConfig(hook_parameters={"train.save_interval": "100"})
    request = make(debugger_hook_config=hook).training_job_request(job_name="dbg-1")
    assert request["DebugHookConfig"]["S3OutputPath"] == f"s3://{s3_bucket}/out"
    assert request["DebugHookConfig"]["HookParameters"] == {"train.save_interval": "100"}
    given = make(debugger_hook_config={"S3OutputPath": f"s3://{s3_bucket}/debug"})
    assert given.training_job_request(job_name="dbg-2")["DebugHookConfig"] == {
        "S3OutputPath": f"s3://{s3_bucket}/debug"}


def test_notebook_placeholders_pass_as_the_official_sdk_passes_them(make: Any) -> None:
    """`checkpoint_local_path=""` sends no LocalPath (the SDK tests it for truth); `[""]`
    subnets and security groups reach the request as they are, for SageMaker to answer."""
    request = make(checkpoint_local_path="", subnets=[""], security_group_ids=[""]
                   ).training_job_request(job_name="blank-1")
    assert "LocalPath" not in request["CheckpointConfig"]
    assert request["VpcConfig"] == {"Subnets": [""], "SecurityGroupIds": [""]}
