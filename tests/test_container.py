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

from tests import dockerfile

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "container" / "Dockerfile"
TRAIN = REPO / "container" / "train"
# Where `pip install` put ddpjob-train (in the image: /usr/local/bin or /opt/conda/bin).
BIN = Path(sys.executable).parent


CPU_WHEELS = "https://download.pytorch.org/whl/cpu"
# Folders on PATH in both base images before any ENV of ours (python:*-slim, pytorch/pytorch).
BASE_PATH = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}


@pytest.fixture(scope="module")
def text() -> str:
    return DOCKERFILE.read_text()


def image(text: str, **build_args: str) -> list[dockerfile.Stage]:
    """The stages that make the image of `build_args`: the last stage and the ones below it."""
    all_stages = dockerfile.stages(text, **build_args)
    by_name = {s.name: s for s in all_stages if s.name}
    chain = [all_stages[-1]]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    return chain[::-1]  # base first


def commands(chain: list[dockerfile.Stage]) -> list[list[str]]:
    return [c for stage in chain for c in stage.run_commands()]


def test_every_base_image_is_an_official_image_pinned_by_tag_or_digest(text):
    for variant, official in (("cuda", "pytorch/pytorch:"), ("cpu", "python:3.")):
        base = image(text, VARIANT=variant)[0].base
        assert base.startswith(official), (variant, base)
        pinned = "@sha256:" in base or re.fullmatch(r"[\w./-]+:[\w.-]+", base)
        assert pinned and not base.endswith(":latest"), f"{variant}: {base} is not pinned"
    assert re.search(r"cuda[\d.]+", image(text, VARIANT="cuda")[0].base)
    assert image(text)[0].base == image(text, VARIANT="cuda")[0].base  # cuda is the default


def test_the_torch_version_argument_installs_that_cpu_torch_in_the_cpu_image(text):
    cpu = dockerfile.pip_installs(commands(image(text, VARIANT="cpu", TORCH_VERSION="2.9.1")))
    assert (["torch==2.9.1"], {"--index-url": CPU_WHEELS, "--no-cache-dir": ""}) in cpu
    cuda = dockerfile.pip_installs(commands(image(text, VARIANT="cuda")))
    assert not [r for r, _ in cuda if any(x.startswith("torch") for x in r)]  # the base has it


def test_efa_is_installed_only_when_its_version_is_given(text):
    def installer_runs(**args: str) -> list[list[str]]:
        return [c for c in commands(image(text, **args)) if c[0] == "./efa_installer.sh"]

    # The RUN is `if [ -n "$EFA_INSTALLER_VERSION" ]; then ...`: its guard decides.
    guard = next(c for c in commands(image(text)) if c[0] == "[")
    assert guard == ["[", "-n", "", "]"]  # empty by default: the installer is skipped
    assert next(c for c in commands(image(text, EFA_INSTALLER_VERSION="1.38.0"))
                if c[0] == "[") == ["[", "-n", "1.38.0", "]"]
    assert installer_runs(EFA_INSTALLER_VERSION="1.38.0")[0][:2] == ["./efa_installer.sh", "-y"]
    assert "--skip-kmod" in installer_runs(EFA_INSTALLER_VERSION="1.38.0")[0]


def test_our_package_is_copied_and_installed_with_pip(text):
    final = image(text)[-1]
    copied = {src: dest for sources, dest in final.copies() for src in sources}
    for source in ("pyproject.toml", "README.md", "sdk", "runtime"):
        assert source in copied, f"{source} is not copied"
    installs = dockerfile.pip_installs(final.run_commands())
    assert (["."], {}) in installs  # the project, from the copied sources; torch is kept
    # `pip install .` runs after the sources were copied, in the WORKDIR they were copied to.
    runs_install = [k == "RUN" and (["."], {}) in dockerfile.pip_installs(dockerfile.commands(v))
                    for k, v in final.steps]
    install_at = runs_install.index(True)
    before = final.steps[:install_at]
    workdir = [v for k, v in before if k == "WORKDIR"][-1]
    for source in ("pyproject.toml", "sdk", "runtime"):
        assert copied[source].rstrip("/") in (".", f"./{source}", workdir, f"{workdir}/{source}")
        assert any(k == "COPY" and source in v.split()[:-1] for k, v in before), source
    apt = [c for c in final.run_commands() if c[:2] == ["apt-get", "install"]]
    assert any("openmpi-bin" in c for c in apt)  # mpirun for distribution={"mpi": ...}


def test_train_is_on_path_executable_and_run_by_default(text):
    chain = image(text)
    final = chain[-1]
    destination = next(dest for sources, dest in final.copies() if "container/train" in sources)
    path = {p for stage in chain for p in stage.env().get("PATH", "").split(":")} | BASE_PATH
    assert destination.rsplit("/", 1)[0] in path
    chmods = [c for c in final.run_commands() if c[0] == "chmod" and destination in c]
    assert chmods and int(chmods[-1][1], 8) & 0o111 == 0o111
    # SageMaker runs `docker run <image> train`: an ENTRYPOINT would receive "train" as an argument.
    assert not final.values("ENTRYPOINT")
    assert final.cmd() == ["train"]
    assert final.env()["PYTHONUNBUFFERED"] == "1"  # logs reach CloudWatch as they are printed


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
