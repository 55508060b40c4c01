"""Client storage against the moto server (real HTTP) and local folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from ddpjob import storage
from ddpjob.errors import StorageError, UserInputError


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "a" / "b").mkdir(parents=True)
    (root / "x.bin").write_bytes(b"x" * 1000)
    (root / "a" / "y.txt").write_text("y")
    (root / "a" / "b" / "z.txt").write_text("z")
    return root


def test_s3_round_trip_and_skip_same(folder: Path, tmp_path: Path, s3_bucket: str) -> None:
    uri = f"s3://{s3_bucket}/data/run-1"
    assert storage.upload_dir(folder, uri) == 3
    assert storage.upload_dir(folder, uri) == 0  # same content: nothing sent again
    (folder / "x.bin").write_bytes(b"X" * 1000)  # same size, new content
    assert storage.upload_dir(folder, uri) == 1
    storage.upload_file(folder / "a" / "y.txt", f"s3://{s3_bucket}/data/run-10/y.txt")
    assert [o.key for o in storage.list_objects(uri)] == ["a/b/z.txt", "a/y.txt", "x.bin"]
    storage.download_prefix(uri, tmp_path / "back")
    assert _tree(tmp_path / "back") == _tree(folder)
    assert storage.exists(f"{uri}/x.bin") and not storage.exists(f"{uri}/nope")
    assert storage.content_sha256(f"{uri}/x.bin") == storage.sha256_file(folder / "x.bin")
    storage.download_file(f"{uri}/a/y.txt", tmp_path / "y.txt")
    assert (tmp_path / "y.txt").read_text() == "y"


def test_multipart_upload_and_download(tmp_path: Path, s3_bucket: str) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * (40 * 4096 + 7))  # ~40 MB: several 16 MB parts
    uri = f"s3://{s3_bucket}/big.bin"
    storage.upload_file(big, uri)
    storage.download_file(uri, tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == big.read_bytes()


def test_file_uris_round_trip(folder: Path, tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    storage.upload_dir(folder, uri)
    assert _tree(tmp_path / "store") == _tree(folder)
    storage.download_prefix(uri, tmp_path / "back")
    assert _tree(tmp_path / "back") == _tree(folder)


@pytest.mark.parametrize(("uri", "match"), [
    ("gs://bucket/x", "unsupported scheme"),
    ("s3://Bad_Bucket/x", "not an S3 bucket name"),
    ("file://relative/path", "needs an absolute path"),
    ("", "must be a URI"),
])
def test_bad_uris(uri: str, match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        storage.parse(uri)


def test_errors_name_uri_and_cause(s3_bucket: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-abc/x .*no such bucket"):
        storage.list_objects("s3://no-such-bucket-abc/x")
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-abc/ failed: no such bucket"):
        storage.check_bucket("s3://no-such-bucket-abc/")
    with pytest.raises(StorageError, match=rf"s3://{s3_bucket}/missing .*no such object"):
        storage.download_file(f"s3://{s3_bucket}/missing", tmp_path / "m")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError, match=rf"s3://{s3_bucket}/x .*no AWS credentials"):
        storage.list_objects(f"s3://{s3_bucket}/x")
