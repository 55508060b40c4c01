"""What a job writes beside the local bucket's folder (`<home>/buckets/.escaped`) is no object:
a FIFO hangs no listing, a link serves no file elsewhere, a hard link or a file whose header
names another key lists nothing (`bucket_store`); in a host's own namespace a job cannot write
there at all (`run.hosts`), while the bucket's folder stays its to write."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from ddpjob.local.aws.official_session import boto_session
from ddpjob.local.session import LocalSession

from tests.conftest import HOST_NAMESPACES
from tests.local.conftest import (
    JOBS,
    log_text,
    source_tar,
    training_request,
    wait_until_ended,
)

LOCAL = "sagemaker-local"


def _name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _escaped_file(key: str, body: bytes) -> bytes:
    """The bytes of an escaped object's file: the key's length and UTF-8, then the body."""
    return len(key.encode()).to_bytes(2, "big") + key.encode() + body


@pytest.mark.timeout(120)  # today's store waited on the FIFO for ever
def test_files_planted_beside_the_bucket_are_no_objects(aws_env: str, session: LocalSession,
                                                        tmp_path: Path) -> None:
    s3 = boto_session(session).client("s3")
    s3.put_object(Bucket=LOCAL, Key="data/", Body=b"marker")  # a real escaped object
    escaped = session.home / "buckets" / ".escaped"
    secret = tmp_path / "secret"
    secret.write_bytes(_escaped_file("leak", b"the secret"))
    os.mkfifo(escaped / _name("pipe"))  # no writer ever comes
    (escaped / _name("leak")).symlink_to(secret)
    os.link(secret, escaped / _name("hard"))  # same header: another key's name, and 2 links
    (escaped / "forged").write_bytes(_escaped_file("forged", b"x"))  # not its key's name
    (escaped / _name("long")).write_bytes(b"\xff\xff" + b"l" * 70_000)  # a header too long

    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=LOCAL)["Contents"]]
    assert listed == ["data/"]
    for key in ("pipe", "leak", "hard", "forged", "long"):
        with pytest.raises(ClientError, match="NoSuchKey"):
            s3.get_object(Bucket=LOCAL, Key=key)
    assert s3.get_object(Bucket=LOCAL, Key="data/")["Body"].read() == b"marker"


@HOST_NAMESPACES
def test_a_job_cannot_write_beside_the_bucket_but_writes_its_folder(
        session: LocalSession, tmp_path: Path) -> None:
    script = "home_probe.py"
    request = training_request(session, "beside", source_tar(tmp_path / "src", JOBS / script),
                               script, workers=1, distributed=False)
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, "beside")
    log = log_text(session, "beside", "algo-1")
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), log)
    assert "beside the bucket: refused OSError (errno 30)" in log  # EROFS: a read-only mount
    buckets = session.home / "buckets"
    assert sorted(p.name for p in buckets.iterdir()) == [LOCAL]
    assert (buckets / LOCAL / "from-the-job").read_text() == "algo-1"
