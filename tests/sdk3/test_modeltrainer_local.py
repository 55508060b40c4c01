"""A v3 ModelTrainer's own request, run by the local backend through ModelTrainer's own drivers.

The official SDK v3 builds and uploads everything (code and drivers to the moto S3 server) and
sends CreateTrainingJob, which `modeltrainer_request.py` captures in the v3 venv. That request
goes to `LocalSession(home).sagemaker_client` unchanged but for the instance type: every host
runs `sm_train.sh` -> `environment.py` -> `torchrun_driver.py` in its own /opt/ml, a 2-host x
2-process torchrun job; the platform syncs checkpoints with the S3 URI and uploads the model.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from ddpjob.local.hostkinds import hostkind
from ddpjob.local.session import LocalSession

from tests.conftest import FIXED_PORT, GROUP_TEARDOWN, HOST_NAMESPACES
from tests.local.conftest import (
    assert_no_processes,
    local_session_at,
    run_request,
    wait_for,
)
from tests.local.test_admission import assert_admitted_once

pytestmark = [
    pytest.mark.slow,
    FIXED_PORT,
    HOST_NAMESPACES,
]

HERE = Path(__file__).parent
CAPTURE = HERE / "modeltrainer_request.py"
SCRIPT = HERE / "jobs" / "modeltrainer" / "train.py"
WHEEL = "ddpjobprobe-0.1-py3-none-any.whl"
TIMEOUT_S = 300


def _wheel(folder: Path) -> None:
    """A one-module wheel, installable offline (the job's requirements.txt names it)."""
    files = {"ddpjobprobe/__init__.py": "",
             "ddpjobprobe-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: ddpjobprobe\n"
                                                   "Version: 0.1\n",
             "ddpjobprobe-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
                                                "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    records = [f"{name},," for name in files] + ["ddpjobprobe-0.1.dist-info/RECORD,,"]
    files["ddpjobprobe-0.1.dist-info/RECORD"] = "\n".join(records) + "\n"
    with zipfile.ZipFile(folder / WHEEL, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)


def _source(tmp_path: Path, script: Path = SCRIPT) -> Path:
    """A source folder: `script` as train.py, the helper that ends its process group and a
    requirement (a local wheel) to install."""
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(script, source / "train.py")
    shutil.copy(GROUP_TEARDOWN, source)
    _wheel(source)
    (source / "requirements.txt").write_text(f"./{WHEEL}\n")
    return source


def modeltrainer_request(sdk3_python: Path, bucket: str, source: Path, hosts: int = 2,
                         processes: int | None = 2, keep_alive: int | None = None,
                         **hyperparameters: Any) -> dict[str, Any]:
    """The CreateTrainingJob request a ModelTrainer (by default 2 hosts x 2 torchrun
    processes; `processes=None`: no `distributed`; `keep_alive`: Compute's
    keep_alive_period_in_seconds) sends."""
    config = {"bucket": bucket, "source_dir": str(source), "instance_count": hosts,
              "processes": processes, "keep_alive": keep_alive,
              "requirements": "requirements.txt", "hyperparameters": hyperparameters,
              "checkpoint_uri": f"s3://{bucket}/ckpt/run-1", "data_uri": f"s3://{bucket}/data"}
    done = subprocess.run([str(sdk3_python), str(CAPTURE), json.dumps(config)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_job(session: LocalSession, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Create the job, wait for its end: (DescribeTrainingJob, every host's log)."""
    job = run_request(session.sagemaker_client, request, TIMEOUT_S)
    return job, _logs(session, request["TrainingJobName"])


def _logs(session: LocalSession, name: str) -> str:
    logs = session.job_dir(name) / "logs"
    return "".join(f"[{p.stem}] {line}\n" for p in sorted(logs.glob("*.log"))
                   for line in p.read_text().splitlines())


def _renamed(request: dict[str, Any], name: str, instance_type: str) -> dict[str, Any]:
    request = copy.deepcopy(request)
    request["TrainingJobName"] = name
    request["ResourceConfig"]["InstanceType"] = instance_type
    return request


@pytest.fixture
def data(s3_bucket: str) -> str:
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/values.txt", Body=b"1 2 3 6")
    return s3_bucket


def _opt_ml() -> list[str] | None:
    return sorted(os.listdir("/opt/ml")) if os.path.isdir("/opt/ml") else None


def test_a_modeltrainer_request_runs_through_its_drivers_on_two_local_hosts(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    machine_opt_ml = _opt_ml()
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), steps=3)
    algorithm = sent["AlgorithmSpecification"]
    assert algorithm["ContainerEntrypoint"] == ["/bin/bash"]
    assert "sm_train.sh" in algorithm["ContainerArguments"][1]
    assert "sagemaker_program" not in sent["HyperParameters"]
    assert {c["ChannelName"] for c in sent["InputDataConfig"]} == {"training", "code",
                                                                    "sm_drivers"}
    with local_session_at(tmp_path / "home") as session:
        job, logs = run_job(session, _renamed(sent, "mt-first", "local"))
        assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), logs[-4000:])
        for rank in range(4):
            host = f"algo-{rank // 2 + 1}"
            assert re.search(rf"\[{host}\] .*rank {rank}/4 host {host} step 2 ", logs), logs
        for node in (0, 1):  # torchrun as ModelTrainer's torchrun_driver starts it
            assert re.search(rf"\[algo-{node + 1}\] .*torchrun --nnodes=2 --nproc_per_node=2 "
                             rf"--master_addr=algo-1 --master_port=7777 --node_rank={node} "
                             rf"train.py --steps 3", logs), logs
        # requirements.txt went into each host's own Python, not this environment.
        found = re.findall(r"\[(algo-\d)\] .*rank \d requirement (\S+)", logs)
        assert {host for host, _ in found} == {"algo-1", "algo-2"}
        assert all(f"/hosts/{host}.python/" in origin for host, origin in found), found
        assert importlib.util.find_spec("ddpjobprobe") is None
        assert not list(session.job_dir("mt-first").glob("hosts/*.python"))
        # The model where the description says; checkpoints synced to the S3 URI.
        s3 = boto3.client("s3")
        model = job["ModelArtifacts"]["S3ModelArtifacts"]
        bucket, key = model.removeprefix("s3://").split("/", 1)
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            assert "model.pt" in tar.getnames()
        listed = s3.list_objects_v2(Bucket=data, Prefix="ckpt/run-1/").get("Contents", [])
        assert [o["Key"] for o in listed] == ["ckpt/run-1/state.pt"]

        # As ModelTrainer sent it (ml.m5.xlarge): checkpoints come down, the job resumes.
        job, logs = run_job(session, _renamed(sent, "mt-second", "ml.m5.xlarge"))
        assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), logs[-4000:])
        assert "[algo-2] " in logs and re.search(r"rank 3 resumed from step 2", logs), logs
        assert re.search(r"rank 0/4 host algo-1 step 5 ", logs), logs
        assert_no_processes(session.home)
    assert _opt_ml() == machine_opt_ml


def test_a_modeltrainer_request_is_admitted_as_the_dry_run_accepts_it(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    """What ModelTrainer sends (its drivers' channels, a container command, 2 hosts): the dry
    run accepts it unchanged and `submit` admits it (tests/local/test_admission.py)."""
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), steps=3)
    with local_session_at(tmp_path / "home") as session:
        job = assert_admitted_once(session, _renamed(sent, "mt-admitted", "local"))
    assert job.host_kind == hostkind.CONTAINER.name and job.hosts == ("algo-1", "algo-2")
    assert {c.name for c in job.channels} == {"training", "code", "sm_drivers"}
    assert job.algorithm["ContainerEntrypoint"] == ["/bin/bash"]


def test_computes_keep_alive_reaches_the_request_and_the_local_client_takes_it(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), keep_alive=120)
    assert sent["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 120
    checked = LocalSession(tmp_path / "home").sagemaker_client.control.checked_request(
        _renamed(sent, "mt-warm", "local"), machine=False)
    assert checked["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 120


def test_without_distributed_the_basic_script_driver_runs_the_script(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), hosts=1, processes=None,
                                steps=2)
    with local_session_at(tmp_path / "home") as session:
        job, logs = run_job(session, _renamed(sent, "mt-basic", "local"))
        assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), logs[-4000:])
        assert "Running Basic Script driver" in logs
        assert re.search(r"\[algo-1\] .*rank 0/1 host algo-1 step 1 ", logs), logs
        assert_no_processes(session.home)


def test_a_failing_script_fails_the_job_with_the_drivers_reason(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), steps=2, fail="true")
    with local_session_at(tmp_path / "home") as session:
        job, logs = run_job(session, _renamed(sent, "mt-fails", "local"))
        assert job["TrainingJobStatus"] == "Failed", logs[-4000:]
        reason = job["FailureReason"]  # the cause first, from torchrun's report; the drivers' text
        assert reason.startswith("AlgorithmError: host algo-2, rank 3, exit code 1: ValueError: "
                                 "rank 3 found a bad value at step 0\n"), reason
        assert "subprocess.CalledProcessError: Command '['torchrun'" in reason
        assert "[algo-2] " in logs and "ValueError: rank 3 found a bad value at step 0" in logs
        assert_no_processes(session.home)


def test_a_failing_script_of_the_basic_driver_names_its_exception(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    """No torchrun report: the cause is the script's traceback in the host's log, not the
    driver's CalledProcessError that it writes to output/failure (which follows)."""
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), hosts=1, processes=None,
                                steps=2, fail="true")
    with local_session_at(tmp_path / "home") as session:
        job, logs = run_job(session, _renamed(sent, "mt-basic-fails", "local"))
        assert job["TrainingJobStatus"] == "Failed", logs[-4000:]
        reason = job["FailureReason"]
        assert reason.startswith("AlgorithmError: host algo-1, exit code 1: ValueError: rank 0 "
                                 "found a bad value at step 0\n"), reason
        assert "subprocess.CalledProcessError: Command '[" in reason
        assert_no_processes(session.home)


def test_a_stop_ends_every_process_and_the_next_job_waits_for_port_7777(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    """The drivers' rendezvous port is fixed: a second job waits in Starting, naming the one
    that holds it, and runs once that one is stopped."""
    sent = modeltrainer_request(sdk3_python, data, _source(tmp_path), steps=1000, sleep=0.5)
    with local_session_at(tmp_path / "home") as session:
        client = session.sagemaker_client

        def described(name: str) -> dict:
            return client.describe_training_job(TrainingJobName=name)

        def training(name: str) -> bool:  # the second resumes from the first's checkpoint
            job = described(name)
            assert job["TrainingJobStatus"] == "InProgress", job.get("FailureReason")
            return re.search(r" step \d+ ", _logs(session, name)) is not None

        client.create_training_job(**_renamed(sent, "mt-long", "local"))
        wait_for(lambda: training("mt-long"), TIMEOUT_S, "training")
        client.create_training_job(**_renamed(sent, "mt-other", "local"))
        wait_for(lambda: described("mt-other")["SecondaryStatusTransitions"][-1][
            "StatusMessage"].endswith("waiting for port 7777, held by job mt-long"),
            TIMEOUT_S, "the second job to wait for the port")
        assert described("mt-other")["SecondaryStatus"] == "Starting"
        for name in ("mt-long", "mt-other"):  # the second starts once the first is stopped
            wait_for(lambda name=name: training(name), TIMEOUT_S, f"{name} training")
            client.stop_training_job(TrainingJobName=name)
            wait_for(lambda name=name: described(name)["TrainingJobStatus"] == "Stopped",
                     TIMEOUT_S, f"the stop of {name}")
        assert_no_processes(session.home)


def test_hostile_changes_to_its_request_are_refused_in_one_line(
    sdk3_python: Path, data: str, tmp_path: Path
) -> None:
    sent = _renamed(modeltrainer_request(sdk3_python, data, _source(tmp_path)), "bad", "local")
    changes = {
        "channel '..'": lambda r: r["InputDataConfig"][0].update(ChannelName=".."),
        "channel '.'": lambda r: r["InputDataConfig"][1].update(ChannelName="."),
        "ContainerEntrypoint[0] is empty": lambda r: r["AlgorithmSpecification"].update(
            ContainerEntrypoint=[""]),
        "not an executable file": lambda r: r["AlgorithmSpecification"].update(
            ContainerEntrypoint=["/etc/shadow"]),
        "contains a NUL": lambda r: r["AlgorithmSpecification"].update(
            ContainerArguments=["-c", "true\x00"]),
        "Environment: 101 entries": lambda r: r.update(
            Environment={f"V{i}": "1" for i in range(101)}),
        "InstanceCount 10000": lambda r: r["ResourceConfig"].update(InstanceCount=10_000),
    }
    with local_session_at(tmp_path / "home") as session:
        for words, change in changes.items():
            request = copy.deepcopy(sent)
            change(request)
            with pytest.raises(ClientError) as raised:
                session.sagemaker_client.create_training_job(**request)
            message = raised.value.response["Error"]["Message"]
            assert words in message and "\n" not in message, (words, message)
            assert not session.job_dir("bad").exists()
