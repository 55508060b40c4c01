"""A v3 ModelTrainer given `LocalSession().official_session()` runs its job on this machine.

Everything happens in the SDK v3 venv (`official_trainer.py`): ModelTrainer resolves its role,
uploads its code and drivers, sends CreateTrainingJob and follows the job with `logs=True`, all
answered here; the data channel and the checkpoints are on a moto S3 server over HTTP, which is
the only place botocore may reach. Each host runs ModelTrainer's own drivers in its own /opt/ml:
a 2-host x 2-process torchrun job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import GROUP_TEARDOWN, HOST_NAMESPACES
from tests.local.conftest import assert_no_processes, local_session_at

pytestmark = [
    pytest.mark.slow,
    HOST_NAMESPACES,
]

HERE = Path(__file__).parent
REPO = HERE.parents[1]
TRAINER = HERE / "official_trainer.py"
SCRIPT = HERE / "jobs" / "modeltrainer" / "train.py"
TIMEOUT_S = 400


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    shutil.copy(SCRIPT, folder / "train.py")
    shutil.copy(GROUP_TEARDOWN, folder)
    return folder


@pytest.fixture
def data(s3_bucket: str) -> str:
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/values.txt", Body=b"1 2 3 6")
    return s3_bucket


def train(sdk3_python: Path, endpoint: str, home: Path, source: Path, bucket: str,
          trainer: dict[str, Any] | None = None,
          **hyperparameters: Any) -> tuple[dict[str, Any], str]:
    """Run ModelTrainer.train(logs=True) in the v3 venv: (its summary, what it printed).
    `trainer` changes the trainer (`instance_type`, `smp`)."""
    config = {"home": str(home), "endpoint": endpoint, "source_dir": str(source),
              "base_job_name": "mt-official", "hyperparameters": hyperparameters,
              "data_uri": f"s3://{bucket}/data", "checkpoint_uri": f"s3://{bucket}/ckpt/run-1",
              **(trainer or {})}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), str(REPO / "runtime")])}
    done = subprocess.run([str(sdk3_python), str(TRAINER), json.dumps(config)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]), "\n".join(lines[:-1])


def _by_stream(printed: str) -> list[tuple[str, str]]:
    """(stream, line) of every log event the SDK printed as `<stream>:` then the line."""
    lines = printed.splitlines()
    return [(lines[i][:-1], lines[i + 1]) for i in range(len(lines) - 1)
            if re.fullmatch(r"mt-official-\S+/algo-\d+-\d+:", lines[i])]


def test_modeltrainer_runs_two_hosts_here_with_logs_checkpoints_and_model(
    sdk3_python: Path, aws_env: str, data: str, source: Path, tmp_path: Path
) -> None:
    machine_opt_ml = sorted(os.listdir("/opt/ml")) if os.path.isdir("/opt/ml") else None
    with local_session_at(tmp_path / "home") as local:
        summary, printed = train(sdk3_python, aws_env, local.home, source, data, steps=3)
        job = summary["job"]
        assert summary["error"] is None and job["TrainingJobStatus"] == "Completed", (
            job.get("FailureReason"), printed[-4000:])
        assert summary["role"] == "arn:aws:iam::000000000000:role/ddpjob-local"
        assert summary["telemetry"] == [] and all(u.startswith(aws_env) for u in summary["sent"])

        # Every host's lines, each under its own stream's name, as the SDK prints them.
        name = job["TrainingJobName"]
        events = _by_stream(printed)
        for rank in range(4):
            host = f"algo-{rank // 2 + 1}"
            assert any(stream.startswith(f"{name}/{host}-") and f"rank {rank}/4 host {host} "
                       f"step 2 " in line for stream, line in events), printed[-4000:]

        # The code and drivers went to the local bucket, the model is where the job says.
        request = json.loads((local.job_dir(name) / "request.json").read_text())
        channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
                    for c in request["InputDataConfig"]}
        assert channels["training"] == f"s3://{data}/data"
        assert channels["code"].startswith("s3://sagemaker-local/mt-official/")
        model = job["ModelArtifacts"]["S3ModelArtifacts"]
        assert model == f"s3://sagemaker-local/mt-official/{name}/output/model.tar.gz"
        archive = local.home / "buckets" / model.removeprefix("s3://")
        with tarfile.open(archive) as tar:
            assert "model.pt" in tar.getnames()

        # Checkpoints went up to the S3 URI, and a second job resumes from them.
        listed = boto3.client("s3").list_objects_v2(Bucket=data, Prefix="ckpt/run-1/")
        assert [o["Key"] for o in listed["Contents"]] == ["ckpt/run-1/state.pt"]
        summary, printed = train(sdk3_python, aws_env, local.home, source, data, steps=1)
        assert summary["job"]["TrainingJobStatus"] == "Completed", printed[-4000:]
        assert any("rank 3 resumed from step 2" in line for _, line in _by_stream(printed))
        body = boto3.client("s3").get_object(Bucket=data, Key="ckpt/run-1/state.pt")["Body"]
        assert len(body.read()) > 0
        assert_no_processes(local.home)
    assert (sorted(os.listdir("/opt/ml")) if os.path.isdir("/opt/ml") else None) == (
        machine_opt_ml)


def test_a_failing_modeltrainer_job_reports_the_failure_reason(
    sdk3_python: Path, aws_env: str, data: str, source: Path, tmp_path: Path
) -> None:
    with local_session_at(tmp_path / "home") as local:
        summary, printed = train(sdk3_python, aws_env, local.home, source, data, steps=2,
                                 fail="true")
        reason = summary["job"]["FailureReason"]
        assert summary["job"]["TrainingJobStatus"] == "Failed"
        headline = reason.splitlines()[0]
        assert re.match(r"AlgorithmError: (host )?algo-[12]\b", headline), reason
        assert "ValueError: rank 3 found a bad value" in reason, reason
        assert summary["error"].startswith("FailedStatusError") and "Failed" in summary["error"]
        assert any("ValueError: rank 3 found a bad value" in line
                   for _, line in _by_stream(printed)), printed[-4000:]
        assert_no_processes(local.home)


@pytest.mark.parametrize(("trainer", "expected"), [
    ({"instance_type": "ml.g5.xlarge"}, "'ml.g5.xlarge' with InstanceCount 2 needs at least 2 "
                                        "GPU(s) on this machine, one set per simulated host; "
                                        "found 0"),
    ({"smp": {"hybrid_shard_degree": 2}}, "smdistributed.modelparallel needs SageMaker's"),
])
def test_what_cannot_run_here_is_refused_in_one_line_and_no_job_starts(
    sdk3_python: Path, aws_env: str, data: str, source: Path, tmp_path: Path,
    trainer: dict[str, Any], expected: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this machine seen without GPUs
    with local_session_at(tmp_path / "home") as local:
        summary, _ = train(sdk3_python, aws_env, local.home, source, data, trainer)
        assert expected in summary["error"] and "\n" not in summary["error"], summary["error"]
        assert not summary["job"] and local.list() == []


def test_the_v3_session_is_the_sdks_own_and_answers_without_an_account(
    sdk3_python: Path, tmp_path: Path
) -> None:
    """No credentials, no region, no endpoint: identity, role, bucket and the refusal of what
    is not answered here, in the v3 venv, without one HTTP request."""
    probe = f"""
import json
from botocore.httpsession import URLLib3Session
def refuse(self, request):
    raise RuntimeError("a request left the machine: " + request.url)
URLLib3Session.send = refuse
from ddpjob.local.session import LocalSession
from sagemaker.core.helper.session_helper import Session, get_execution_role
session = LocalSession({str(tmp_path / "home")!r}).official_session()
try:
    session.sagemaker_client.list_endpoints()
except Exception as exc:
    refused = str(exc)
print(json.dumps([type(session) is Session, session.boto_region_name, session.default_bucket(),
                  session.account_id(), get_execution_role(session), refused]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null",
               PYTHONPATH=os.pathsep.join([str(REPO / "sdk"), str(REPO / "runtime")]))
    done = subprocess.run([str(sdk3_python), "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    is_sdk_session, region, bucket, account, role, refused = json.loads(
        done.stdout.strip().splitlines()[-1])
    assert (is_sdk_session, region, bucket, account) == (True, "us-east-1", "sagemaker-local",
                                                         "000000000000")
    assert role == "arn:aws:iam::000000000000:role/ddpjob-local"
    assert "ListEndpoints is not answered on this machine" in refused

