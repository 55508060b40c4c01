"""No image to build: SageMaker's PyTorch (and Hugging Face) training containers, picked as the
official SDK picks them, and the launch each distribution form gets there."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
from ddpjob import HuggingFace, PyTorch, image_uris
from ddpjob.errors import UserInputError

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"
REGION = "us-east-1"
TORCHRUN_HPS = {"sagemaker_torch_distributed_enabled": "true"}


def official(name: str) -> Any:
    """A module of the official SDK, imported quietly."""
    import importlib

    logging.getLogger("sagemaker.config").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(f"sagemaker.{name}")


def official_image(framework: str, version: str, py_version: str, instance_type: str,
                   **extra: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return official("image_uris").get_training_image_uri(
            REGION, framework, version, py_version, instance_type=instance_type, **extra)


@pytest.fixture
def make(src: Path, aws_session: Any, s3_bucket: str):
    def build(cls: type = PyTorch, **extra: Any) -> Any:
        kwargs = {"entry_point": "train.py", "source_dir": str(src), "role": ROLE,
                  "instance_type": "ml.m5.xlarge", "instance_count": 2,
                  "session": aws_session, "output_path": f"s3://{s3_bucket}/out", **extra}
        return cls(**kwargs)
    return build


@pytest.mark.parametrize("instance_type", ["ml.m5.xlarge", "ml.g5.12xlarge"])
def test_default_image_is_the_official_pick(make: Any, instance_type: str) -> None:
    estimator = make(instance_type=instance_type,
                     distribution={"torch_distributed": {"enabled": True}})
    request = estimator.training_job_request(job_name="dlc-1")
    expected = official_image("pytorch", *image_uris.default_versions(), instance_type)
    assert request["AlgorithmSpecification"]["TrainingImage"] == expected
    assert ("-gpu-" in expected) == instance_type.startswith("ml.g")
    assert request["AlgorithmSpecification"]["EnableSageMakerMetricsTimeSeries"] is True
    assert estimator.uses_dlc


def test_default_version_is_the_newest_with_cpu_and_gpu_images() -> None:
    from packaging.version import Version

    config = official("image_uris").config_for_framework("pytorch")["training"]
    both = [v for v, entry in config["versions"].items()
            if set(entry.get("processors", config["processors"])) >= {"cpu", "gpu"}]
    version, py_version = image_uris.default_versions()
    assert version == max(both, key=Version)
    assert py_version == config["versions"][version]["py_versions"][-1]


def test_given_versions_and_newest_py_version(make: Any) -> None:
    request = make(framework_version="2.0.0").training_job_request(job_name="dlc-2")
    assert request["AlgorithmSpecification"]["TrainingImage"] == official_image(
        "pytorch", "2.0.0", "py310", "ml.m5.xlarge")


def test_image_uri_selects_the_ddpjob_image(make: Any) -> None:
    estimator = make(image_uri=IMAGE)
    assert not estimator.uses_dlc
    assert estimator.training_job_request(job_name="own-1")[
        "AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert make(image_uri=official_image("pytorch", "2.0.0", "py310", "ml.m5.xlarge")).uses_dlc


# distribution -> what the job gets on the DLC (JSON-encoded, besides sagemaker_instance_type)
DLC_FORMS: list[tuple[str, dict, dict[str, str]]] = [
    ("torch_distributed", {"torch_distributed": {"enabled": True}}, TORCHRUN_HPS),
    ("pytorchddp", {"pytorchddp": {"enabled": True}}, TORCHRUN_HPS),
    ("smddp", {"smdistributed": {"dataparallel": {"enabled": True}}}, TORCHRUN_HPS),
    ("processes-only", {"processes_per_host": 4},
     {**TORCHRUN_HPS, "ddpjob_processes_per_host": "4"}),
    ("mpi", {"mpi": {"enabled": True, "processes_per_host": 2, "custom_mpi_options": "-x A=1"}},
     {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2",
      "sagemaker_mpi_custom_mpi_options": '"-x A=1"'}),
]


@pytest.mark.parametrize(("form", "distribution", "expected"), DLC_FORMS,
                         ids=[f[0] for f in DLC_FORMS])
def test_distribution_on_the_dlc(form: str, distribution: dict, expected: dict[str, str],
                                 make: Any) -> None:
    hps = make(distribution=distribution).training_job_request(job_name="d-1")["HyperParameters"]
    launch = {k: v for k, v in hps.items()
              if k.startswith(("sagemaker_torch", "sagemaker_mpi", "sagemaker_distributed",
                               "ddpjob_"))}
    assert launch == expected  # mpi on two hosts is allowed here: the DLC has sshd


def official_distribution_hps(distribution: dict, instance_type: str) -> dict[str, str]:
    """What the official PyTorch estimator adds for `distribution` (its own code)."""
    import boto3

    sagemaker = official("session")
    pytorch = official("pytorch")
    session = sagemaker.Session(boto_session=boto3.Session(
        region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y"),
        default_bucket="bucket")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator = pytorch.PyTorch(
            entry_point="train.py", role=ROLE, instance_type=instance_type, instance_count=2,
            framework_version="2.0.0", py_version="py310", image_uri=IMAGE,
            distribution=distribution, sagemaker_session=session)
        raw = estimator._pytorch_distribution_configuration(estimator.distribution)
    return {k: json.dumps(v) for k, v in raw.items()}


PARITY_FORMS = [
    {"torch_distributed": {"enabled": True}},
    {"pytorchddp": {"enabled": True}},
    {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-v"}}},
    {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-x NCCL_DEBUG"}},
    {"mpi": {"enabled": True, "processes_per_host": 8},
     "smdistributed": {"modelparallel": {"enabled": True,
                                         "parameters": {"partitions": 2, "ddp": True}}}},
    {"torch_distributed": {"enabled": True},
     "smdistributed": {"modelparallel": {"enabled": True,
                                         "parameters": {"tensor_parallel_degree": 2}}}},
]


@pytest.mark.parametrize("distribution", PARITY_FORMS, ids=lambda d: "+".join(d))
def test_own_image_gets_what_the_official_sdk_sends(distribution: dict, make: Any) -> None:
    count = 1 if "mpi" in distribution else 2
    hps = make(image_uri=IMAGE, instance_type="ml.p4d.24xlarge", instance_count=count,
               distribution=distribution).training_job_request(job_name="p-1")["HyperParameters"]
    expected = official_distribution_hps(distribution, "ml.p4d.24xlarge")
    assert {k: hps[k] for k in expected if k in hps} == expected
    assert set(expected) <= set(hps)


def test_model_parallel_runs_on_the_smp_container(make: Any) -> None:
    distribution = {"torch_distributed": {"enabled": True},
                    "smdistributed": {"modelparallel": {
                        "enabled": True, "parameters": {"tensor_parallel_degree": 2,
                                                        "hybrid_shard_degree": 4}}}}
    request = make(instance_type="ml.p4d.24xlarge", framework_version="2.3.1",
                   py_version="py311", distribution=distribution
                   ).training_job_request(job_name="smp-1")
    assert request["AlgorithmSpecification"]["TrainingImage"] == official_image(
        "pytorch", "2.3.1", "py311", "ml.p4d.24xlarge", distribution=distribution)
    assert json.loads(request["HyperParameters"]["mp_parameters"]) == {
        "tensor_parallel_degree": 2, "hybrid_shard_degree": 4}
    assert request["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"


def test_hugging_face_container(make: Any) -> None:
    estimator = make(HuggingFace, instance_type="ml.g5.12xlarge", transformers_version="4.49.0",
                     pytorch_version="2.5.1", py_version="py311",
                     distribution={"torch_distributed": {"enabled": True}})
    request = estimator.training_job_request(job_name="hf-1")
    assert request["AlgorithmSpecification"]["TrainingImage"] == official_image(
        "huggingface", "4.49.0", "py311", "ml.g5.12xlarge", pytorch_version="2.5.1")
    assert estimator.uses_dlc
    assert request["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"


def test_hugging_face_needs_its_versions(make: Any) -> None:
    with pytest.raises(UserInputError, match="transformers_version and pytorch_version are"):
        make(HuggingFace, py_version="py311")
    with pytest.raises(UserInputError, match=r"pytorch_version \(transformers 4.49.0\) '1.0' "
                                             r"has no SageMaker training container; available"):
        make(HuggingFace, transformers_version="4.49.0", pytorch_version="1.0",
             py_version="py311").training_job_request(job_name="hf-2")


def test_hugging_face_runs_locally_without_versions(src: Path, local_session: Any) -> None:
    request = HuggingFace(entry_point="train.py", source_dir=str(src), session=local_session,
                          instance_count=2, distribution={"torch_distributed": {"enabled": True}}
                          ).training_job_request(job_name="hf-local-1")
    assert request["AlgorithmSpecification"]["TrainingImage"] == "ddpjob-local"
    assert request["TrainingJobName"] == "hf-local-1"


def test_plain_estimator_on_sagemaker_needs_an_image(make: Any) -> None:
    from ddpjob import Estimator

    with pytest.raises(UserInputError, match="image_uri is required for an Estimator"):
        make(Estimator).training_job_request(job_name="e-1")


def test_training_compiler_is_sent_as_the_official_sdk_sends_it(
        make: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pytorchxla` with a TrainingCompilerConfig: the `-trcomp-` container and the SDK's
    hyperparameters on ml.*; without the config (as the SDK) or locally, one line."""
    compiler = official("pytorch").TrainingCompilerConfig()
    request = make(framework_version="1.13.1", py_version="py39", instance_type="ml.g5.12xlarge",
                   compiler_config=compiler, distribution={"pytorchxla": {"enabled": True}},
                   ).training_job_request(job_name="trcomp-1")
    assert request["AlgorithmSpecification"]["TrainingImage"] == official_image(
        "pytorch", "1.13.1", "py39", "ml.g5.12xlarge", compiler_config=compiler)
    hps = request["HyperParameters"]
    assert hps["sagemaker_pytorch_xla_multi_worker_enabled"] == "true"
    assert hps["sagemaker_training_compiler_enabled"] == "true"
    with pytest.raises(UserInputError, match="'pytorchxla' needs SageMaker Training Compiler"):
        make(instance_type="ml.g5.12xlarge", distribution={"pytorchxla": {"enabled": True}})
    monkeypatch.setenv("DDPJOB_HOME", str(tmp_path / "home"))
    with pytest.raises(UserInputError, match="'pytorchxla' .* runs only on SageMaker"):
        make(instance_type="local", session=None, compiler_config=compiler,
             distribution={"pytorchxla": {"enabled": True}})


def test_hugging_face_refuses_the_training_compiler(make: Any) -> None:
    """Without its compiler_config, a `pytorchxla` request would miss the compiler's container."""
    with pytest.raises(UserInputError, match="'pytorchxla' .* not supported by ddpjob.Hugg"):
        make(HuggingFace, transformers_version="4.28.1", pytorch_version="2.0.0",
             py_version="py310", distribution={"pytorchxla": {"enabled": True}})
