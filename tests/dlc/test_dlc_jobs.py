"""Issue 10: a request naming SageMaker's PyTorch training DLC, played on this machine through the
DLC's own entry point (sagemaker-training + sagemaker-pytorch-training), host by host.

The toolkits run in a Python that sees torch and the toolkits but not ddpjob (as in the DLC): the
script's `ddpjob_runtime` comes from the code archive. S3 is a moto server; the local backend
does SageMaker's platform duties around the toolkit (config files, channels, checkpoint sync both
ways, model.tar.gz).
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from ddpjob import packaging
from ddpjob.local.aws.boto3_client import LocalSageMakerClient
from ddpjob.local.isolation import sandbox

from tests.conftest import FIXED_PORT, GROUP_TEARDOWN
from tests.local.conftest import assert_no_processes, local_session_at, run_request

pytestmark = [pytest.mark.slow, FIXED_PORT]

JOBS = Path(__file__).parent / "jobs"
TARGET = [3.0, -1.0, 2.0, 5.0]
LR = 0.25
TIMEOUT_S = 240


@pytest.fixture(scope="module")
def dlc_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python like the DLC's: torch and both toolkits importable, ddpjob not; `torchrun` beside.

    A bare venv whose one .pth names this venv's site-packages: the packages there import, but
    the .pth files there (ddpjob's editable install) are not processed."""
    env = tmp_path_factory.mktemp("dlc-python") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True)
    ours = sysconfig.get_paths()["purelib"]
    Path(site.stdout.strip(), "dlc-packages.pth").write_text(ours + "\n")
    torchrun = env / "bin" / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\nfrom torch.distributed.run import main\n"
                        f"sys.exit(main())\n")
    torchrun.chmod(0o755)
    probe = "import torch, sagemaker_training, sagemaker_pytorch_container, importlib.util as u; " \
            "print(u.find_spec('ddpjob'), u.find_spec('ddpjob_runtime'))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["None", "None"], done.stdout
    return str(python)


def dlc_image(instance_type: str = "ml.m5.xlarge") -> str:
    """The training DLC the official SDK picks for PyTorch 2.5 / py311, from its own registry."""
    from sagemaker import image_uris

    return image_uris.retrieve("pytorch", region="us-east-1", version="2.5", py_version="py311",
                               instance_type=instance_type, image_scope="training")


def upload_code(bucket: str, tmp: Path) -> str:
    """sourcedir.tar.gz with ddpjob_runtime packed beside the script, on S3."""
    archive = tmp / packaging.ARCHIVE_NAME
    packaging.pack(packaging.check_source("dlc_train.py", JOBS, [GROUP_TEARDOWN]), archive,
                   include_runtime=True)
    boto3.client("s3").upload_file(str(archive), bucket, "code/sourcedir.tar.gz")
    return f"s3://{bucket}/code/sourcedir.tar.gz"


def dlc_request(name: str, bucket: str, code: str, image: str, steps: int,
                **overrides: Any) -> dict[str, Any]:
    """A CreateTrainingJob request as the official SDK sends it for the DLC (torch_distributed)."""
    hps = {"sagemaker_program": "dlc_train.py", "sagemaker_submit_directory": code,
           "sagemaker_torch_distributed_enabled": True, "sagemaker_container_log_level": 20,
           "sagemaker_job_name": name, "sagemaker_region": "us-east-1", "steps": steps,
           "lr": LR}
    request = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
        "HyperParameters": {k: json.dumps(v) for k, v in hps.items()},
        "InputDataConfig": [{"ChannelName": "training", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/data/",
            "S3DataDistributionType": "FullyReplicated"}}}],
        "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2,
                           "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": TIMEOUT_S},
        "CheckpointConfig": {"S3Uri": f"s3://{bucket}/ckpt/run-1"},
    }
    request.update(overrides)
    return request


def run_job(client: LocalSageMakerClient, request: dict[str, Any]) -> tuple[dict, list[str]]:
    """Create the job, wait for its end; (DescribeTrainingJob, every host's log lines)."""
    job = run_request(client, request, TIMEOUT_S)
    name = request["TrainingJobName"]
    logs = client.control.store.job_dir(name) / "logs"
    lines = [f"[{p.stem}] {line}" for p in sorted(logs.glob("*.log"))
             for line in p.read_text().splitlines()]
    return job, lines


def expected_loss(step: int) -> float:
    """Loss before update `step` from w = 0: each SGD step (lr 0.25, 4 values) keeps 7/8 of
    the distance, so the loss shrinks by (7/8)^2 per step."""
    return sum(v * v for v in TARGET) / len(TARGET) * (7 / 8) ** (2 * step)


def _keys(bucket: str, prefix: str) -> list[str]:
    found = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"] for o in found)


@pytest.mark.parametrize("namespaces", ["on", "off"])
def test_a_dlc_request_runs_through_the_dlc_toolkits_and_resumes_from_its_checkpoint(
        s3_bucket: str, tmp_path: Path, dlc_python: str, monkeypatch, namespaces: str) -> None:
    """In their own namespaces the hosts are `algo-N` with their `/opt/ml`, as on SageMaker;
    without, loopback addresses name them and the toolkit is told their root."""
    if namespaces == "on" and sandbox.available():
        pytest.skip(f"no host namespaces here: {sandbox.available()}")
    if namespaces == "off":
        monkeypatch.setenv(sandbox.SWITCH_ENV, "0")
    names = ["algo-1", "algo-2"] if namespaces == "on" else ["127.0.0.1", "127.0.0.2"]
    monkeypatch.setenv("DDPJOB_DLC_PYTHON", dlc_python)
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/target.json",
                                  Body=json.dumps(TARGET).encode())
    code, image = upload_code(s3_bucket, tmp_path), dlc_image()
    assert re.fullmatch(r"763104351884\.dkr\.ecr\.us-east-1\.amazonaws\.com/pytorch-training:"
                        r"2\.5-cpu-py311", image), image
    with local_session_at(tmp_path / "home") as session:
        client = session.sagemaker_client
        first, lines = run_job(client, dlc_request("dlc-first", s3_bucket, code, image, steps=3))
        assert first["TrainingJobStatus"] == "Completed", (first.get("FailureReason"), lines[-40:])
        text = "\n".join(lines)
        # The DLC's toolkit launched torchrun itself, on the first host's name, port 7777.
        for host, rank in (("algo-1", 0), ("algo-2", 1)):
            assert re.search(rf"\[{host}\] .*torchrun --nnodes 2 --nproc_per_node 1 --master_addr "
                             rf"{re.escape(names[0])} --master_port 7777 --node_rank {rank} "
                             rf"dlc_train\.py", text), text[-3000:]
        runtime_lines = [line for line in lines if "runtime_from=" in line]
        assert len(runtime_lines) == 2
        for line in runtime_lines:  # the runtime from the archive; ddpjob not installed there
            found = dict(kv.split("=", 1) for kv in line.split("] ", 1)[1].split())
            assert found["runtime_from"] == str(Path(found["code_dir"]) / "ddpjob_runtime")
            assert found["ddpjob_installed"] == "False" and found["world"] == "2"
        found = [dict(kv.split("=", 1) for kv in line.split("] ", 1)[1].split())
                 for line in runtime_lines]
        assert {f["host"] for f in found} == set(names)
        if namespaces == "on":
            assert {f["code_dir"] for f in found} == {"/opt/ml/code"}
        assert "fresh start rank=0" in text and "fresh start rank=1" in text
        first_losses = {int(s): float(v) for s, v in re.findall(r"step=(\d+) loss=(\S+)", text)}
        assert sorted(first_losses) == [0, 1, 2]
        for step, loss in first_losses.items():
            assert math.isclose(loss, expected_loss(step), rel_tol=1e-6), (step, loss)
        # SageMaker's sync took the checkpoint folder up (only rank 0 wrote, keep=3).
        assert _keys(s3_bucket, "ckpt/run-1/") == [
            f"ckpt/run-1/step-00000000{s}/{f}" for s in range(3)
            for f in ("manifest.json", "state.pt")]
        model = boto3.client("s3").get_object(
            Bucket=s3_bucket, Key="output/dlc-first/output/model.tar.gz")["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(model)) as tar:
            assert tar.getnames() == ["model.pt"]
        assert first["ModelArtifacts"]["S3ModelArtifacts"] == \
            f"s3://{s3_bucket}/output/dlc-first/output/model.tar.gz"

        # A second job with the same checkpoint URI: both hosts resume after step 2.
        second, lines = run_job(client, dlc_request("dlc-second", s3_bucket, code, image, steps=5))
        assert second["TrainingJobStatus"] == "Completed", (second.get("FailureReason"),
                                                            lines[-40:])
        text = "\n".join(lines)
        assert "resumed rank=0 step=2" in text and "resumed rank=1 step=2" in text
        losses = {int(s): float(v) for s, v in re.findall(r"step=(\d+) loss=(\S+)", text)}
        assert sorted(losses) == [3, 4]
        for step, loss in losses.items():
            assert math.isclose(loss, expected_loss(step), rel_tol=1e-6), (step, loss)
        assert "step-000000004/manifest.json" in " ".join(_keys(s3_bucket, "ckpt/run-1/"))
        assert_no_processes(session.home)


def test_a_failing_dlc_script_fails_the_job_with_the_toolkits_reason(
        s3_bucket: str, tmp_path: Path, dlc_python: str, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_DLC_PYTHON", dlc_python)
    archive = tmp_path / packaging.ARCHIVE_NAME  # a file:// code URI (the toolkit reads paths)
    packaging.pack(packaging.check_source("dlc_train.py", JOBS, [GROUP_TEARDOWN]), archive,
                   include_runtime=True)
    request = dlc_request("dlc-no-data", s3_bucket, archive.as_uri(), dlc_image(),
                          steps=2)  # and no target.json in the channel
    request["ResourceConfig"]["InstanceCount"] = 1
    with local_session_at(tmp_path / "home") as session:
        job, lines = run_job(session.sagemaker_client, request)
        assert job["TrainingJobStatus"] == "Failed", lines[-30:]
        assert "target.json" in job["FailureReason"], job["FailureReason"]
        assert "FileNotFoundError" in job["FailureReason"]
        assert_no_processes(session.home)


def _create_error(tmp_path: Path, request: dict[str, Any]) -> str:
    with pytest.raises(ClientError) as caught:
        LocalSageMakerClient(tmp_path / "home").create_training_job(**request)
    assert not (tmp_path / "home" / "jobs" / request["TrainingJobName"]).exists()
    return caught.value.response["Error"]["Message"]


def test_without_the_toolkits_a_dlc_request_is_one_error_naming_the_extra(
        tmp_path: Path, monkeypatch) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    monkeypatch.setenv("DDPJOB_DLC_PYTHON", str(bare / "bin" / "python"))
    request = dlc_request("dlc-bare", "b", "s3://b/code/sourcedir.tar.gz", dlc_image(), steps=1)
    message = _create_error(tmp_path, request)
    assert 'pip install "ddpjob[dlc]"' in message and "sagemaker-pytorch-training" in message


@pytest.mark.parametrize(("change", "expected"), [
    ({"InstanceType": "ml.g5.xlarge"}, "GPU image.*CPU instance types"),
    ({"sagemaker_distributed_dataparallel_enabled": "true"}, "smdistributed.dataparallel"),
    ({"sagemaker_mpi_enabled": "true"}, "'mpi' over several hosts needs sshd"),
])
def test_what_local_hosts_cannot_run_is_refused_before_anything_starts(
        tmp_path: Path, change: dict[str, str], expected: str) -> None:
    kind = change.get("InstanceType", "ml.m5.xlarge")
    request = dlc_request("dlc-refused", "b", "s3://b/code/sourcedir.tar.gz", dlc_image(kind),
                          steps=1)
    request["ResourceConfig"]["InstanceType"] = kind
    request["HyperParameters"].update({k: v for k, v in change.items() if k != "InstanceType"})
    assert re.search(expected, _create_error(tmp_path, request))


def test_a_gpu_ml_instance_type_with_another_image_is_refused_locally(tmp_path: Path) -> None:
    """CPU `ml.*` types run any other image on ddpjob's runtime; GPU ones do not."""
    request = dlc_request("not-dlc", "b", "s3://b/code/sourcedir.tar.gz",
                          "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda", steps=1)
    request["ResourceConfig"]["InstanceType"] = "ml.g5.xlarge"
    assert "'ml.g5.xlarge' cannot run in local mode" in _create_error(tmp_path, request)


def test_a_spot_dlc_job_is_interrupted_and_resumes_from_the_checkpoints_it_synced(
        s3_bucket: str, tmp_path: Path, dlc_python: str, monkeypatch) -> None:
    """Issue 22 on the DLC path: the hosts run the toolkit; on the reclaim's SIGTERM the
    platform's last checkpoint sync runs, and the next attempt's fresh hosts bring it down."""
    from ddpjob.local.base.interruptions import GRACE_ENV

    from tests.local.conftest import JOBS as LOCAL_JOBS
    from tests.local.conftest import wait_for

    monkeypatch.setenv("DDPJOB_DLC_PYTHON", dlc_python)
    monkeypatch.setenv(GRACE_ENV, "10")
    archive = tmp_path / packaging.ARCHIVE_NAME
    packaging.pack(packaging.check_source("spot_train.py", LOCAL_JOBS, [GROUP_TEARDOWN]), archive,
                   include_runtime=True)
    request = dlc_request("dlc-spot", s3_bucket, archive.as_uri(), dlc_image(), steps=6,
                          EnableManagedSpotTraining=True,
                          StoppingCondition={"MaxRuntimeInSeconds": TIMEOUT_S,
                                             "MaxWaitTimeInSeconds": 2 * TIMEOUT_S})
    del request["InputDataConfig"]  # the script reads none
    hps = request["HyperParameters"]
    del hps["lr"]
    hps.update({"sagemaker_program": json.dumps("spot_train.py"), "hold-at": json.dumps("0")})
    with local_session_at(tmp_path / "home") as session:
        session.sagemaker_client.create_training_job(**request)
        ready = session.job_dir("dlc-spot") / "hosts" / "algo-1" / "output" / "data" / "ready-0"
        wait_for(ready.exists, TIMEOUT_S, "the DLC job to hold after checkpointing")
        session.interrupt("dlc-spot")
        job = wait_for(lambda: (d := session.describe("dlc-spot")).is_terminal and d.raw,
                       TIMEOUT_S, "the DLC job to end")
        text = "".join(p.read_text() for p in
                       sorted((session.job_dir("dlc-spot") / "logs").glob("algo-*.log")))
        assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), text[-3000:])
        assert [t["Status"] for t in job["SecondaryStatusTransitions"]].count("Interrupted") == 1
        assert "rank 0 loaded 1 first 2" in text and "rank 1 loaded 1 first 2" in text
        assert "rank 0 notes ['note-0']" in text  # synced up on SIGTERM, brought back down
        assert "ckpt/run-1/note-0" in _keys(s3_bucket, "ckpt/run-1/")


def test_every_dlc_hosts_checkpoint_folder_reaches_s3_and_a_clash_is_warned_once(
        s3_bucket: str, tmp_path: Path, dlc_python: str, monkeypatch) -> None:
    """As SageMaker syncs every instance's checkpoint folder: both hosts' files under S3Uri;
    `same.txt`, written by both hosts with different bytes, is the second host's, and one
    warning in the job's logs names it and both hosts."""
    from tests.e2e.test_every_host_checkpoints import CLASH
    from tests.e2e.test_every_host_checkpoints import JOBS as SYNC_JOBS

    monkeypatch.setenv("DDPJOB_DLC_PYTHON", dlc_python)
    names = ["algo-1", "algo-2"] if sandbox.available() is None else ["127.0.0.1", "127.0.0.2"]
    archive = tmp_path / packaging.ARCHIVE_NAME
    packaging.pack(packaging.check_source("every_host.py", SYNC_JOBS, [GROUP_TEARDOWN]), archive,
                   include_runtime=True)
    uri = f"s3://{s3_bucket}/ckpt/hosts"
    request = dlc_request("dlc-hosts", s3_bucket, archive.as_uri(), dlc_image(), steps=1,
                          CheckpointConfig={"S3Uri": uri})
    del request["InputDataConfig"]
    request["HyperParameters"] = {
        **{k: v for k, v in request["HyperParameters"].items() if k.startswith("sagemaker_")},
        "sagemaker_program": json.dumps("every_host.py"),
        "mode": json.dumps("files,clash"), "uri": json.dumps(uri)}
    with local_session_at(tmp_path / "home") as session:
        job, lines = run_job(session.sagemaker_client, request)
        assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-40:])
        assert _keys(s3_bucket, "ckpt/hosts/") == [
            f"ckpt/hosts/{name}" for name in (f"{names[0]}-rank0.json",
                                              f"{names[1]}-rank1.json", "config.json",
                                              "same.txt")]
        kept = boto3.client("s3").get_object(Bucket=s3_bucket, Key="ckpt/hosts/same.txt")
        assert kept["Body"].read() == f"from {names[1]}".encode()
        warnings = [line for line in lines if CLASH in line]
        assert len(warnings) == 1 and warnings[0].startswith("[algo-2] "), warnings
        assert f"hosts algo-1 and algo-2 wrote different bytes to {uri}/same.txt" in warnings[0]
        assert_no_processes(session.home)
