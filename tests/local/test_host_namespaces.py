"""Every local host is its own `/opt/ml`: real two-host jobs whose hosts run in their own mount
namespaces (a SageMaker-style script with hard-coded paths, a rank that `chmod`s its channel),
and the fallback without namespaces."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path

import boto3
import pytest
import torch
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession
from ddpjob_runtime.shared import storage

from tests.conftest import REGION
from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    log_text,
    machine_state,
    source_tar,
    training_request,
    wait_until_ended,
)

pytestmark = pytest.mark.slow

FILES = {"a.txt": b"alpha\n", "b.bin": os.urandom(2000)}
EXPECTED = {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}


def _run(session: LocalSession, tmp_path: Path, name: str, script: str, hosts: int,
         **extra) -> dict:
    """`script` on `hosts` hosts x 1 worker under torchrun (plain torch.distributed, gloo); the
    fixed `PYTHONHASHSEED` has the workers forked from the job's template, in their host's
    namespace as every process of the host (the hosts' isolation, not a hash seed per rank, is
    the subject)."""
    source = source_tar(tmp_path / f"src-{name}", JOBS / script)
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, script, hosts=hosts, workers=1, hash_seed="0", **extra))
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"),
                                                     log_text(session, name, "algo-1"))
    return job


def _reports(session: LocalSession, name: str, hosts: int) -> dict[str, dict]:
    return {f"algo-{i}": json.loads((session.job_dir(name) / "hosts" / f"algo-{i}" / "output"
                                     / "data" / "report.json").read_text())
            for i in range(1, hosts + 1)}


def _channel(uri: str) -> dict:
    return {"InputDataConfig": [{"ChannelName": "training", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}}}]}


def test_a_sagemaker_style_script_runs_unchanged_and_no_rank_changes_what_others_read(
        session: LocalSession, tmp_path: Path, s3_bucket: str) -> None:
    if sandbox.available() is not None:
        pytest.skip(f"no host namespaces here: {sandbox.available()}")
    before = machine_state()
    s3 = boto3.client("s3", region_name=REGION)
    for key, data in FILES.items():
        s3.put_object(Bucket=s3_bucket, Key=f"data/{key}", Body=data)
    channel = _channel(f"s3://{s3_bucket}/data")
    checkpoints = tmp_path / "ckpt"
    job = _run(session, tmp_path, "opt-ml", "sagemaker_style.py", hosts=2,
               CheckpointConfig={"S3Uri": checkpoints.as_uri()}, **channel)

    reports = _reports(session, "opt-ml", 2)
    for host, report in reports.items():
        assert report["host"] == host
        assert report["before"] == report["after"] == EXPECTED, host  # each read its channel
        assert report["resolved"] == {"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}
        variables = report["variables"]
        assert json.loads(variables.pop("SM_HOSTS")) == ["algo-1", "algo-2"]
        assert variables == {
            "SM_CURRENT_HOST": host, "SM_MODEL_DIR": "/opt/ml/model",
            "SM_CHANNEL_TRAINING": "/opt/ml/input/data/training",
            "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data", "SAGEMAKER_BASE_DIR": None}
    # The last rank's chmod was refused: the other host, the cache and a later job read the
    # original bytes.
    assert reports["algo-2"]["chmod and write"] == "EROFS"
    entries = [p for p in (session.home / "cache" / "entries").rglob("*") if p.is_file()]
    assert sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in entries) == \
        sorted(EXPECTED.values())
    _run(session, tmp_path, "opt-ml-later", "sagemaker_style.py", hosts=1, **channel)
    assert _reports(session, "opt-ml-later", 1)["algo-1"]["before"] == EXPECTED

    # /opt/ml/checkpoints reached CheckpointConfig.S3Uri; /opt/ml/model is in model.tar.gz.
    assert torch.load(checkpoints / "state.pt") == {"step": 7}
    model = storage.parse(job["ModelArtifacts"]["S3ModelArtifacts"]).path
    with tarfile.open(model) as tar:
        assert tar.getnames() == ["model.pt"]
        assert torch.equal(torch.load(tar.extractfile("model.pt"))["w"], torch.arange(3.0))
    assert_no_processes(session.home)
    assert machine_state() == before  # no /opt/ml made, no mount left in the machine's table


def test_without_namespaces_hosts_keep_their_folders_and_the_job_says_so_once(
        session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.SWITCH_ENV, "0")
    before = machine_state()
    _run(session, tmp_path, "folders", "noop.py", hosts=2)
    warning = f"hosts have no namespace of their own ({sandbox.SWITCH_ENV}=0 turns them off)"
    assert log_text(session, "folders", "algo-1").count(warning) == 1
    assert warning not in log_text(session, "folders", "algo-2")
    root = session.job_dir("folders") / "hosts" / "algo-2"
    platform = json.loads((root / "input" / "config" / "platform.json").read_text())
    assert platform["host_addresses"] == {"algo-1": "127.0.0.1", "algo-2": "127.0.0.1"}
    assert_no_processes(session.home)
    assert machine_state() == before
