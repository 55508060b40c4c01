"""A full disk under the local bucket: S3's 500 InternalError naming the cause, never a
traceback, a lost object or a temp file left behind.

The disk is real: a 2 MiB tmpfs mounted, for one child process, in its own user and mount
namespaces (`unshare -rm`), where the bucket's home lies.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, subprocess, sys
from pathlib import Path
home = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(home)], check=True)
from botocore.exceptions import ClientError
from ddpjob.local.aws.official_session import boto_session
from ddpjob.local.session import LocalSession

s3 = boto_session(LocalSession(home / "home")).client("s3")
B, kept, big = "sagemaker-local", b"k" * 300_000, b"b" * 3_000_000
seen = {}

def outcome(name, call):
    try:
        call()
        seen[name] = "ok"
    except ClientError as exc:
        error = exc.response["Error"]
        seen[name] = [exc.response["ResponseMetadata"]["HTTPStatusCode"], error["Code"],
                      error["Message"]]

outcome("put kept", lambda: s3.put_object(Bucket=B, Key="kept", Body=kept))
outcome("put big", lambda: s3.put_object(Bucket=B, Key="big", Body=big))
outcome("overwrite kept", lambda: s3.put_object(Bucket=B, Key="kept", Body=big))
outcome("put escaped", lambda: s3.put_object(Bucket=B, Key="data/", Body=big))
upload = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
outcome("upload part", lambda: s3.upload_part(Bucket=B, Key="mp", UploadId=upload,
                                              PartNumber=1, Body=big))
seen["kept intact"] = s3.get_object(Bucket=B, Key="kept")["Body"].read() == kept
seen["listed"] = [o["Key"] for o in s3.list_objects_v2(Bucket=B).get("Contents", [])]
seen["temp files"] = [str(p) for p in home.rglob("*.tmp")]
print(json.dumps(seen))
"""


def test_a_full_disk_is_an_s3_internal_error_and_loses_nothing(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rm", "true"]).returncode != 0:
        pytest.skip("needs unshare and unprivileged user namespaces to mount a small disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run([unshare, "-rm", sys.executable, "-c", CHILD, str(disk)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    full = [500, "InternalError"]
    for name in ("put big", "overwrite kept", "put escaped", "upload part"):
        assert seen[name][:2] == full and "disk of the local bucket is full" in seen[name][2]
    assert seen["put kept"] == "ok" and seen["kept intact"] is True
    assert seen["listed"] == ["kept"] and seen["temp files"] == []
