"""ddpjob_runtime.shared.storage (client and runtime alike) against a moto server over real HTTP,
and against local folders."""

from __future__ import annotations

import os
from pathlib import Path

import boto3
import pytest
from ddpjob.errors import StorageError as ClientStorageError
from ddpjob_runtime.shared import storage
from ddpjob_runtime.shared.errors import (
    InvalidURIError,
    ObjectNotFoundError,
    StorageError,
    UserInputError,
)

MIB = 1024 * 1024


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _listing(uri: str) -> list[tuple[str, int]]:
    return [(info.key, info.size) for info in storage.list_objects(uri)]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "a" / "b").mkdir(parents=True)
    (root / "x.bin").write_bytes(b"x" * 1000)
    (root / "a" / "y.txt").write_text("y")
    (root / "a" / "b" / "z.txt").write_text("z")
    return root


def test_client_and_runtime_share_the_errors() -> None:
    assert ClientStorageError is StorageError  # the CLI's exit code 3 and `except` clauses


def test_s3_round_trip_and_skip_unchanged(folder: Path, tmp_path: Path, s3_bucket: str) -> None:
    uri = f"s3://{s3_bucket}/data/run-1"
    assert storage.upload_dir(folder, uri) == 3
    assert storage.upload_dir(folder, uri) == 0  # same content: nothing sent again
    (folder / "x.bin").write_bytes(b"X" * 1000)  # same size, new content
    assert storage.upload_dir(folder, uri, progress=True) == 1
    storage.upload_file(folder / "a" / "y.txt", f"s3://{s3_bucket}/data/run-10/y.txt")
    assert [o.key for o in storage.list_objects(uri)] == ["a/b/z.txt", "a/y.txt", "x.bin"]
    storage.download_prefix(uri, tmp_path / "back")
    assert _tree(tmp_path / "back") == _tree(folder)
    assert storage.exists(f"{uri}/x.bin") and not storage.exists(f"{uri}/nope")
    assert storage.content_sha256(f"{uri}/x.bin") == storage.sha256_file(folder / "x.bin")
    assert storage.content_sha256(f"{uri}/nope") is None
    storage.download_file(f"{uri}/a/y.txt", tmp_path / "y.txt", progress=True)
    assert (tmp_path / "y.txt").read_text() == "y"
    assert storage.read_bytes(f"{uri}/a/b/z.txt") == b"z"


def test_file_round_trip_multipart(s3_bucket: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_THRESHOLD", str(5 * MIB))
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_CHUNKSIZE", str(5 * MIB))
    data = os.urandom(11 * MIB + 7)
    (tmp_path / "big.bin").write_bytes(data)
    storage.upload_file(tmp_path / "big.bin", f"s3://{s3_bucket}/a/big.bin", progress=True)
    head = boto3.client("s3").head_object(Bucket=s3_bucket, Key="a/big.bin")
    assert head["ETag"].strip('"').endswith("-3")  # three parts: it went multipart
    out = storage.download_file(f"s3://{s3_bucket}/a/big.bin", tmp_path / "out" / "b.bin")
    assert out == tmp_path / "out" / "b.bin"
    assert out.read_bytes() == data


def test_upload_to_folder_uri_keeps_name(s3_bucket: str, tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("x")
    storage.upload_file(tmp_path / "x.txt", f"s3://{s3_bucket}/dir/")
    assert _listing(f"s3://{s3_bucket}/dir") == [("x.txt", 1)]


def test_prefix_semantics_folder_not_siblings(s3_bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("bb")
    storage.upload_dir(src, f"s3://{s3_bucket}/ckpt/run-1")
    storage.upload_file(src / "a.txt", f"s3://{s3_bucket}/ckpt/run-10/other.txt")
    storage.upload_file(src / "a.txt", f"s3://{s3_bucket}/ckpt/run-1.txt")

    assert _listing(f"s3://{s3_bucket}/ckpt/run-1") == [("a.txt", 1), ("sub/b.txt", 2)]
    got = storage.download_prefix(f"s3://{s3_bucket}/ckpt/run-1", tmp_path / "dl")
    assert sorted(p.relative_to(tmp_path / "dl").as_posix() for p in got) == ["a.txt", "sub/b.txt"]
    assert _tree(tmp_path / "dl") == _tree(src)
    # a URI naming one object brings that object alone
    one = storage.download_prefix(f"s3://{s3_bucket}/ckpt/run-10/other.txt", tmp_path / "one")
    assert one == [tmp_path / "one" / "other.txt"]
    # list_prefix says what download_prefix brings, ETags included, relative to `folder`
    listing = storage.list_prefix(f"s3://{s3_bucket}/ckpt/run-10/other.txt")
    assert listing.folder == f"s3://{s3_bucket}/ckpt/run-10/"
    assert [(o.key, o.size) for o in listing.objects] == [("other.txt", 1)]
    folder = storage.list_prefix(f"s3://{s3_bucket}/ckpt/run-1")
    assert folder.folder == f"s3://{s3_bucket}/ckpt/run-1/"
    assert [o.key for o in folder.objects] == ["a.txt", "sub/b.txt"]
    assert listing.objects[0].etag == folder.objects[0].etag is not None  # same content


def test_many_small_files_and_delete_prefix(s3_bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(60):
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"f{i}.txt").write_text(str(i))
    assert storage.upload_dir(src, f"s3://{s3_bucket}/many/") == 60
    storage.download_prefix(f"s3://{s3_bucket}/many/", tmp_path / "dl")
    assert _tree(tmp_path / "dl") == _tree(src)
    storage.upload_file(src / "d0" / "f0.txt", f"s3://{s3_bucket}/many-2/keep.txt")
    assert storage.delete_prefix(f"s3://{s3_bucket}/many") == 60
    assert storage.list_objects(f"s3://{s3_bucket}/many") == []
    assert _listing(f"s3://{s3_bucket}/many-2") == [("keep.txt", 1)]


def test_prefix_download_refuses_keys_that_escape(s3_bucket: str, tmp_path: Path) -> None:
    s3 = boto3.client("s3")
    s3.put_object(Bucket=s3_bucket, Key="evil/../../escaped.txt", Body=b"x")
    with pytest.raises(StorageError, match=r"object key '\.\./\.\./escaped\.txt' refused"):
        storage.download_prefix(f"s3://{s3_bucket}/evil/", tmp_path / "dl")
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.parametrize("as_file_uri", [True, False])
def test_local_paths_and_file_uris(tmp_path: Path, as_file_uri: bool) -> None:
    def uri(p: Path) -> str:
        return p.as_uri() if as_file_uri else str(p)

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    storage.upload_dir(src, uri(tmp_path / "store" / "run-1"))
    assert _tree(tmp_path / "store" / "run-1") == _tree(src)
    (tmp_path / "store" / "run-10").mkdir()
    (tmp_path / "store" / "run-10" / "c.txt").write_text("c")
    assert _listing(uri(tmp_path / "store" / "run-1")) == [("a.txt", 1), ("sub/b.txt", 1)]
    storage.download_prefix(uri(tmp_path / "store" / "run-1"), tmp_path / "dl")
    assert _tree(tmp_path / "dl") == _tree(src)
    single = storage.download_prefix(uri(src / "a.txt"), tmp_path / "single")
    assert single == [tmp_path / "single" / "a.txt"]
    listing = storage.list_prefix(uri(src / "a.txt"))
    assert storage.parse(listing.folder).path == src
    assert [(o.key, o.size) for o in listing.objects] == [("a.txt", 1)]
    storage.download_file(uri(src / "sub" / "b.txt"), tmp_path / "f.txt")
    assert (tmp_path / "f.txt").read_text() == "b"
    storage.delete_prefix(uri(tmp_path / "store" / "run-1"))
    assert not (tmp_path / "store" / "run-1").exists()
    assert (tmp_path / "store" / "run-10" / "c.txt").exists()


def test_a_named_pipe_in_a_local_folder_is_refused_never_read(tmp_path: Path) -> None:
    """Uploading a folder of one's own with a FIFO: a clear error; listing or downloading a
    store's folder with one (file:// channels, checkpoints): left out with a warning. Never a
    read that blocks for ever."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    os.mkfifo(src / "pipe")
    with pytest.raises(StorageError, match=r"src/pipe: it is not a regular file \(a named pipe"):
        storage.upload_dir(src, (tmp_path / "store").as_uri())
    assert [info.key for info in storage.list_prefix(src.as_uri()).objects] == ["a.txt"]
    assert storage.download_prefix(src.as_uri(), tmp_path / "dl") == [tmp_path / "dl" / "a.txt"]


def test_the_local_bucket_is_its_folder_where_the_backend_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the local backend's processes `s3://sagemaker-local/...` is a file under the folder
    `$DDPJOB_LOCAL_BUCKET`; elsewhere it is an S3 URI like any other."""
    bucket = tmp_path / "buckets" / "sagemaker-local"
    assert storage.parse("s3://sagemaker-local/run/x").is_s3
    monkeypatch.setenv("DDPJOB_LOCAL_BUCKET", str(bucket))
    assert storage.parse("s3://sagemaker-local/run/x").path == bucket / "run" / "x"
    assert storage.parse("s3://sagemaker-local").path == bucket
    assert not storage.is_s3("s3://sagemaker-local/run/") and storage.is_s3("s3://other/run")
    (tmp_path / "a.txt").write_text("a")
    storage.upload_file(tmp_path / "a.txt", "s3://sagemaker-local/run/")
    assert (bucket / "run" / "a.txt").read_text() == "a"
    assert _listing("s3://sagemaker-local/run") == [("a.txt", 1)]
    assert storage.download_prefix("s3://sagemaker-local/run", tmp_path / "dl") == [
        tmp_path / "dl" / "a.txt"]
    with pytest.raises(InvalidURIError, match="cannot keep this key apart"):
        storage.parse("s3://sagemaker-local/run/../../x")


@pytest.mark.parametrize(("uri", "match"), [
    ("gs://bucket/x", "unsupported scheme 'gs'"),
    ("s3:/bad", "unsupported scheme 's3' or malformed"),  # never a local folder 's3:/bad'
    ("S3://bucket/x", "unsupported scheme 'S3'"),
    ("file:relative", "unsupported scheme 'file'"),
    ("s3:///key", "'' is not an S3 bucket name"),
    ("s3://Bad_Bucket/x", "not an S3 bucket name"),
    ("file://relative/path", "needs an absolute path"),
    ("file://host/path", "needs an absolute path"),
    ("", "must be a URI"),
])
def test_bad_uris(uri: str, match: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidURIError, match=match) as info:
        storage.parse(uri, argument="checkpoint_s3_uri")
    assert "\n" not in str(info.value) and "checkpoint_s3_uri" in str(info.value)
    # a bad argument to the client, a storage failure to the runtime
    assert isinstance(info.value, UserInputError) and isinstance(info.value, StorageError)
    with pytest.raises(InvalidURIError):
        storage.download_file(uri, tmp_path / "x")


def test_missing_bucket_and_key(s3_bucket: str, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"^download of s3://no-such-bucket-x/k failed: "
                                           r"no such bucket$") as info:
        storage.download_file("s3://no-such-bucket-x/k", tmp_path / "x")
    assert not isinstance(info.value, ObjectNotFoundError)
    with pytest.raises(ObjectNotFoundError, match=rf"^download of s3://{s3_bucket}/nope failed: "
                                                  rf"no such object$"):
        storage.download_file(f"s3://{s3_bucket}/nope", tmp_path / "x")
    (tmp_path / "f").write_text("f")
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-x/k failed: no such bucket"):
        storage.upload_file(tmp_path / "f", "s3://no-such-bucket-x/k")
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-x/p failed: no such bucket"):
        storage.list_objects("s3://no-such-bucket-x/p")
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-x/ failed: no such bucket"):
        storage.check_bucket("s3://no-such-bucket-x/")
    storage.check_bucket(f"s3://{s3_bucket}/x")
    with pytest.raises(ObjectNotFoundError, match="no such file or folder"):
        storage.download_prefix(str(tmp_path / "absent"), tmp_path / "dl")
    with pytest.raises(ObjectNotFoundError, match="no such file or folder"):
        storage.read_bytes(str(tmp_path / "absent"))


def test_no_credentials(aws_env: str, tmp_path: Path, monkeypatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no IMDS probe on this machine
    with pytest.raises(StorageError, match=r"^download of s3://bucket/k failed: no AWS cred.*"
                       r"a local job needs none for s3://sagemaker-local/\.\.\. or file://"):
        storage.download_file("s3://bucket/k", tmp_path / "x")


def test_access_denied_is_named() -> None:
    from botocore.exceptions import ClientError
    from ddpjob_runtime.shared.storage import s3

    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject")
    assert s3.explain(denied) == ("access denied (check the bucket policy and your IAM "
                                  "permissions)", False)
