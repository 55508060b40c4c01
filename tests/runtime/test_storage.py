"""ddpjob_runtime.storage against a moto server over real HTTP, and against local folders."""

from __future__ import annotations

import os
from pathlib import Path

import boto3
import pytest
from ddpjob_runtime import storage
from ddpjob_runtime.errors import StorageError

MIB = 1024 * 1024


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_file_round_trip_multipart(s3_bucket: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_THRESHOLD", str(5 * MIB))
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_CHUNKSIZE", str(5 * MIB))
    data = os.urandom(11 * MIB + 7)
    (tmp_path / "big.bin").write_bytes(data)
    storage.upload_file(tmp_path / "big.bin", f"s3://{s3_bucket}/a/big.bin")
    head = boto3.client("s3").head_object(Bucket=s3_bucket, Key="a/big.bin")
    assert head["ETag"].strip('"').endswith("-3")  # three parts: it went multipart
    out = storage.download_file(f"s3://{s3_bucket}/a/big.bin", tmp_path / "out" / "b.bin")
    assert out == tmp_path / "out" / "b.bin"
    assert out.read_bytes() == data


def test_upload_to_folder_uri_keeps_name(s3_bucket: str, tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("x")
    storage.upload_file(tmp_path / "x.txt", f"s3://{s3_bucket}/dir/")
    assert storage.list_objects(f"s3://{s3_bucket}/dir") == [("x.txt", 1)]


def test_prefix_semantics_folder_not_siblings(s3_bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("bb")
    storage.upload_dir(src, f"s3://{s3_bucket}/ckpt/run-1")
    storage.upload_file(src / "a.txt", f"s3://{s3_bucket}/ckpt/run-10/other.txt")
    storage.upload_file(src / "a.txt", f"s3://{s3_bucket}/ckpt/run-1.txt")

    assert storage.list_objects(f"s3://{s3_bucket}/ckpt/run-1") == [("a.txt", 1), ("sub/b.txt", 2)]
    got = storage.download_prefix(f"s3://{s3_bucket}/ckpt/run-1", tmp_path / "dl")
    assert sorted(p.relative_to(tmp_path / "dl").as_posix() for p in got) == ["a.txt", "sub/b.txt"]
    assert _tree(tmp_path / "dl") == _tree(src)
    # a URI naming one object brings that object alone
    one = storage.download_prefix(f"s3://{s3_bucket}/ckpt/run-10/other.txt", tmp_path / "one")
    assert one == [tmp_path / "one" / "other.txt"]


def test_many_small_files_and_delete_prefix(s3_bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(60):
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"f{i}.txt").write_text(str(i))
    uris = storage.upload_dir(src, f"s3://{s3_bucket}/many/")
    assert len(uris) == 60
    storage.download_prefix(f"s3://{s3_bucket}/many/", tmp_path / "dl")
    assert _tree(tmp_path / "dl") == _tree(src)
    storage.upload_file(src / "d0" / "f0.txt", f"s3://{s3_bucket}/many-2/keep.txt")
    assert storage.delete_prefix(f"s3://{s3_bucket}/many") == 60
    assert storage.list_objects(f"s3://{s3_bucket}/many") == []
    assert storage.list_objects(f"s3://{s3_bucket}/many-2") == [("keep.txt", 1)]


@pytest.mark.parametrize("as_file_uri", [True, False])
def test_local_paths_and_file_uris(tmp_path: Path, as_file_uri: bool) -> None:
    def uri(p: Path) -> str:
        return p.as_uri() if as_file_uri else str(p)

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    storage.upload_dir(src, uri(tmp_path / "store" / "run-1"))
    (tmp_path / "store" / "run-10").mkdir()
    (tmp_path / "store" / "run-10" / "c.txt").write_text("c")
    assert storage.list_objects(uri(tmp_path / "store" / "run-1")) == [("a.txt", 1),
                                                                       ("sub/b.txt", 1)]
    storage.download_prefix(uri(tmp_path / "store" / "run-1"), tmp_path / "dl")
    assert _tree(tmp_path / "dl") == _tree(src)
    single = storage.download_prefix(uri(src / "a.txt"), tmp_path / "single")
    assert single == [tmp_path / "single" / "a.txt"]
    storage.download_file(uri(src / "sub" / "b.txt"), tmp_path / "f.txt")
    assert (tmp_path / "f.txt").read_text() == "b"
    storage.delete_prefix(uri(tmp_path / "store" / "run-1"))
    assert not (tmp_path / "store" / "run-1").exists()
    assert (tmp_path / "store" / "run-10" / "c.txt").exists()


@pytest.mark.parametrize("uri,message", [
    ("gs://bucket/key", "scheme must be"),
    ("s3:///key", "no bucket"),
    ("file://host/path", "absolute path"),
    ("", "empty"),
])
def test_bad_uris(uri: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=message) as info:
        storage.download_file(uri, tmp_path / "x")
    assert "\n" not in str(info.value)


def test_missing_bucket_and_key(s3_bucket: str, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"^s3://no-such-bucket-x/k: no such bucket$"):
        storage.download_file("s3://no-such-bucket-x/k", tmp_path / "x")
    with pytest.raises(StorageError, match=rf"^s3://{s3_bucket}/nope: no such key$"):
        storage.download_file(f"s3://{s3_bucket}/nope", tmp_path / "x")
    (tmp_path / "f").write_text("f")
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-x/k: no such bucket"):
        storage.upload_file(tmp_path / "f", "s3://no-such-bucket-x/k")
    with pytest.raises(StorageError, match=r"no such bucket"):
        storage.list_objects("s3://no-such-bucket-x/p")
    with pytest.raises(StorageError, match="no such file or folder"):
        storage.download_prefix(str(tmp_path / "absent"), tmp_path / "dl")


def test_no_credentials(aws_env: str, tmp_path: Path, monkeypatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no IMDS probe on this machine
    with pytest.raises(StorageError, match=r"^s3://b/k: no AWS credentials found"):
        storage.download_file("s3://b/k", tmp_path / "x")


def test_access_denied_is_named(tmp_path: Path) -> None:
    from botocore.exceptions import ClientError

    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject")
    assert storage._explain(denied) == "access denied"
