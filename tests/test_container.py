"""The training image without a Docker engine: the Dockerfile read statically, and `train` run
as SageMaker runs it in the container, against a temporary job root (SAGEMAKER_BASE_DIR)."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "container" / "Dockerfile"
TRAIN = REPO / "container" / "train"
# Where `pip install` put ddpjob-train (in the image: /usr/local/bin or /opt/conda/bin).
BIN = Path(sys.executable).parent


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    result, pending = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        result.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    return result


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def global_args(steps: list[tuple[str, str]]) -> dict[str, str]:
    """ARG defaults declared before the first FROM (the only ones FROM lines can use)."""
    args = {}
    for keyword, value in steps:
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = value.partition("=")
            args[name] = default
    return args


def base_images(steps: list[tuple[str, str]], **build_args: str) -> dict[str, str]:
    """Stage name -> image reference of every FROM, with ARG defaults (or `build_args`) put in."""
    args = {**global_args(steps), **build_args}
    images = {}
    for keyword, value in steps:
        if keyword != "FROM":
            continue
        image, _, stage = value.partition(" AS ")
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        images[stage.strip() or "final"] = image
    return images


def test_every_base_image_is_an_official_image_pinned_by_tag_or_digest(dockerfile):
    images = base_images(dockerfile)
    assert images["base-cuda"].startswith("pytorch/pytorch:")
    assert re.search(r"cuda[\d.]+", images["base-cuda"])
    assert images["base-cpu"].startswith("python:3.")
    for stage in ("base-cuda", "base-cpu"):
        image = images[stage]
        pinned = "@sha256:" in image or re.fullmatch(r"[\w./-]+:[\w.-]+", image)
        assert pinned and not image.endswith(":latest"), f"{stage}: {image} is not pinned"


def test_the_variant_build_argument_picks_cuda_or_cpu(dockerfile):
    assert global_args(dockerfile)["VARIANT"] == "cuda"
    stages = base_images(dockerfile)
    assert stages["final"] == "base-cuda"
    assert base_images(dockerfile, VARIANT="cpu")["final"] == "base-cpu"
    assert {"base-cuda", "base-cpu"} <= set(stages)
    cpu_steps = " ".join(v for k, v in dockerfile if k == "RUN")
    assert "download.pytorch.org/whl/cpu" in cpu_steps and "torch==${TORCH_VERSION}" in cpu_steps


def test_our_package_is_copied_and_installed(dockerfile):
    copies = [v for k, v in dockerfile if k == "COPY"]
    for source in ("pyproject.toml", "sdk", "runtime"):
        assert any(source in c.split()[:-1] for c in copies), f"{source} is not copied"
    runs = [v for k, v in dockerfile if k == "RUN"]
    assert any(re.search(r"pip install \.(\s|$)", r) for r in runs)
    install = next(i for i, (k, v) in enumerate(dockerfile) if k == "RUN" and "pip install ." in v)
    last_copy = max(i for i, (k, v) in enumerate(dockerfile)
                    if k == "COPY" and ("sdk" in v or "runtime" in v))
    assert last_copy < install


def test_train_is_on_path_executable_and_run_by_default(dockerfile):
    copy = next(v for k, v in dockerfile if k == "COPY" and "container/train" in v)
    destination = copy.split()[-1]
    assert destination in {"/usr/local/bin/train", "/usr/bin/train"}
    assert any(k == "RUN" and "chmod" in v and destination in v for k, v in dockerfile)
    # SageMaker runs `docker run <image> train`: an ENTRYPOINT would receive "train" as an argument.
    assert not [v for k, v in dockerfile if k == "ENTRYPOINT"]
    assert json.loads([v for k, v in dockerfile if k == "CMD"][-1]) == ["train"]


def test_dockerignore_lets_in_what_the_dockerfile_copies():
    ignore = (REPO / "container" / "Dockerfile.dockerignore").read_text().split()
    for path in ("!pyproject.toml", "!README.md", "!sdk/", "!runtime/", "!container/train"):
        assert path in ignore


def test_train_script_is_executable_posix_sh_that_execs_the_bootstrap():
    assert os.access(TRAIN, os.X_OK)
    text = TRAIN.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert re.search(r'^exec ddpjob-train "\$@"$', text, re.MULTILINE)
    subprocess.run(["sh", "-n", str(TRAIN)], check=True)


def _job_root(root: Path, script: str, instance_type: str, interface: str = "eth0") -> Path:
    """A one-host /opt/ml as SageMaker writes it (no platform.json): config and the source."""
    source = root.parent / "sourcedir.tar.gz"
    with tarfile.open(source, "w:gz") as tar:
        data = script.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    config = root / "input" / "config"
    config.mkdir(parents=True)
    hyperparameters = {"sagemaker_program": "train.py", "sagemaker_job_name": "container-test",
                       "sagemaker_submit_directory": source.as_uri(),
                       "ddpjob_processes_per_host": 1, "epochs": 2}
    files = {
        "hyperparameters.json": {k: json.dumps(v) for k, v in hyperparameters.items()},
        "resourceconfig.json": {
            "current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": interface,
            "current_instance_type": instance_type, "current_group_name": "homogeneousCluster",
            "instance_groups": [{"instance_group_name": "homogeneousCluster",
                                 "instance_type": instance_type, "hosts": ["algo-1"]}],
        },
        "inputdataconfig.json": {},
    }
    for name, content in files.items():
        (config / name).write_text(json.dumps(content))
    return root


# Writes what the container gave the user's script into the model folder.
SCRIPT = """
import json, os, sys
names = ["FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE", "NCCL_SOCKET_IFNAME",
         "NCCL_PROTO", "SM_CURRENT_HOST", "SM_HOSTS", "SM_MODEL_DIR"]
seen = {n: os.environ.get(n) for n in names}
seen["argv"] = sys.argv[1:]
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""


def run_train(root: Path, **env: str) -> subprocess.CompletedProcess:
    """`train` as the container runs it: no arguments, the job root, our package on PATH."""
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("NCCL_", "FI_", "RDMAV_", "SM_"))}
    environment.update(SAGEMAKER_BASE_DIR=str(root), PATH=f"{BIN}{os.pathsep}/usr/bin:/bin",
                       **env)
    return subprocess.run([str(TRAIN)], env=environment, cwd=root, capture_output=True,
                          text=True, timeout=240)


def test_train_runs_the_job_with_sagemakers_efa_settings(tmp_path):
    root = _job_root(tmp_path / "ml", SCRIPT, "ml.p4d.24xlarge", interface="ethwe")
    done = run_train(root)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((root / "model" / "seen.json").read_text())
    assert seen == {
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1",
        "NCCL_SOCKET_IFNAME": "ethwe", "NCCL_PROTO": "simple", "SM_CURRENT_HOST": "algo-1",
        "SM_HOSTS": '["algo-1"]', "SM_MODEL_DIR": str(root / "model"),
        "argv": ["--epochs", "2"],
    }
    assert not (root / "output" / "failure").exists()


def test_train_without_efa_sets_only_nccl_and_keeps_what_is_already_set(tmp_path):
    root = _job_root(tmp_path / "ml", SCRIPT, "ml.g5.2xlarge")
    done = run_train(root, NCCL_SOCKET_IFNAME="^lo,docker")
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads((root / "model" / "seen.json").read_text())
    assert seen["FI_PROVIDER"] is None and seen["FI_EFA_USE_DEVICE_RDMA"] is None
    assert seen["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert seen["NCCL_PROTO"] == "simple"


def test_train_exits_with_the_scripts_code_and_writes_the_failure(tmp_path):
    root = _job_root(tmp_path / "ml", SCRIPT, "ml.m5.xlarge")
    done = run_train(root, EXIT_WITH="3")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "algo-1" in (root / "output" / "failure").read_text()


def test_train_with_a_broken_config_fails_with_the_runtimes_error(tmp_path):
    root = _job_root(tmp_path / "ml", SCRIPT, "ml.m5.xlarge")
    (root / "input" / "config" / "resourceconfig.json").write_text("{not json")
    done = run_train(root)
    assert done.returncode == 1
    assert "resourceconfig.json: not valid JSON" in (root / "output" / "failure").read_text()
    assert "Traceback" not in done.stderr  # train's own config reading stays quiet


def test_train_quotes_hostile_values(tmp_path):
    root = _job_root(tmp_path / "ml", SCRIPT, "ml.m5.xlarge", interface="eth0; touch pwned")
    done = run_train(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (root / "pwned").exists()
    seen = json.loads((root / "model" / "seen.json").read_text())
    assert seen["NCCL_SOCKET_IFNAME"] == "eth0; touch pwned"
    assert shlex.split(shlex.quote(seen["NCCL_SOCKET_IFNAME"])) == ["eth0; touch pwned"]
