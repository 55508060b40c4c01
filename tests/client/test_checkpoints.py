"""checkpoints() and download_checkpoint() over contract-shaped folders, s3:// and file://."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from ddpjob import PyTorch
from ddpjob.errors import StorageError, UserInputError
from ddpjob_runtime.shared import storage

from tests.conftest import S3_ON_MOTO


def _write_checkpoint(root: Path, step: int, payload: bytes, complete: bool = True) -> None:
    folder = root / f"step-{step:09d}"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(payload if complete else payload[:1])
    manifest = {"step": step, "time": 1000.0 + step,
                "files": {"state.pt": {"size": len(payload),
                                       "sha256": hashlib.sha256(payload).hexdigest()}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """run-1: steps 100, 200 complete, 300 incomplete, 400 without manifest; run-10: step 900."""
    root = tmp_path / "ckpt"
    _write_checkpoint(root / "run-1", 100, b"a" * 10)
    _write_checkpoint(root / "run-1", 200, b"b" * 20)
    _write_checkpoint(root / "run-1", 300, b"c" * 30, complete=False)
    (root / "run-1" / "step-000000400").mkdir()
    (root / "run-1" / "step-000000400" / "state.pt").write_bytes(b"d")
    _write_checkpoint(root / "run-10", 900, b"z" * 5)
    return root


@pytest.fixture(params=["file", S3_ON_MOTO])
def checkpoint_uri(request: Any, layout: Path) -> str:
    if request.param == "file":
        return (layout / "run-1").as_uri()
    bucket = request.getfixturevalue("s3_bucket")
    storage.upload_dir(layout, f"s3://{bucket}/ckpt")
    return f"s3://{bucket}/ckpt/run-1"  # no trailing slash: must not see run-10


def _estimator(src: Path, local_session: Any, uri: str) -> PyTorch:
    return PyTorch(entry_point="train.py", source_dir=src, instance_type="local",
                   session=local_session, checkpoint_s3_uri=uri)


def test_lists_complete_checkpoints_only(checkpoint_uri: str, src: Path,
                                         local_session: Any) -> None:
    found = _estimator(src, local_session, checkpoint_uri).checkpoints()
    assert [(c.step, c.time) for c in found] == [(100, 1100.0), (200, 1200.0)]
    assert found[-1].uri == f"{checkpoint_uri}/step-000000200/"


def test_downloads_latest_and_given_step(checkpoint_uri: str, src: Path, local_session: Any,
                                         tmp_path: Path) -> None:
    estimator = _estimator(src, local_session, checkpoint_uri)
    latest = estimator.download_checkpoint(tmp_path / "dl")
    assert latest == tmp_path / "dl" / "step-000000200"
    assert (latest / "state.pt").read_bytes() == b"b" * 20
    assert json.loads((latest / "manifest.json").read_text())["step"] == 200
    first = estimator.download_checkpoint(tmp_path / "dl", step=100)
    assert (first / "state.pt").read_bytes() == b"a" * 10
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["step-000000100",
                                                                   "step-000000200"]
    with pytest.raises(UserInputError, match=r"no complete checkpoint of step 300 .*100, 200"):
        estimator.download_checkpoint(tmp_path / "dl", step=300)


def test_a_corrupt_latest_checkpoint_falls_back_to_the_one_before(
        layout: Path, src: Path, local_session: Any, tmp_path: Path, caplog) -> None:
    (layout / "run-1" / "step-000000200" / "state.pt").write_bytes(b"B" * 20)  # same size
    estimator = _estimator(src, local_session, (layout / "run-1").as_uri())
    got = estimator.download_checkpoint(tmp_path / "dl")
    assert got == tmp_path / "dl" / "step-000000100"
    assert "step-000000200/: state.pt does not match its manifest" in caplog.text
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["step-000000100"]
    with pytest.raises(StorageError, match="state.pt does not match its manifest"):
        estimator.download_checkpoint(tmp_path / "dl", step=200)  # asked for: no fallback


def test_errors_without_checkpoints(src: Path, local_session: Any, tmp_path: Path) -> None:
    empty = (tmp_path / "empty").as_uri()
    with pytest.raises(UserInputError, match=r"no complete checkpoint under .*empty"):
        _estimator(src, local_session, empty).download_checkpoint(tmp_path / "dl")
    with pytest.raises(UserInputError, match="checkpoint_s3_uri is not set"):
        _estimator(src, local_session, None).checkpoints()


def test_a_checkpoint_pruned_while_listing_is_skipped(layout: Path, s3_bucket: str, src: Path,
                                                      local_session: Any) -> None:
    """The job prunes old checkpoints (manifest first) while the client lists them: the one that
    vanished between ListObjects and reading its manifest is left out, not an error."""
    import boto3

    storage.upload_dir(layout, f"s3://{s3_bucket}/ckpt")
    uri = f"s3://{s3_bucket}/ckpt/run-1"
    pruned = "ckpt/run-1/step-000000100/"
    pruner = boto3.client("s3")

    def prune_before_read(params: dict, **_: Any) -> None:
        if params["url_path"].endswith(f"{pruned}manifest.json"):
            for name in ("manifest.json", "state.pt"):
                pruner.delete_object(Bucket=s3_bucket, Key=pruned + name)

    events = storage.client().meta.events
    events.register("before-call.s3.GetObject", prune_before_read)
    try:
        found = _estimator(src, local_session, uri).checkpoints()
    finally:
        events.unregister("before-call.s3.GetObject", prune_before_read)
    assert [c.step for c in found] == [200]


def test_hostile_manifest_is_ignored(s3_bucket: str, layout: Path, tmp_path: Path, src: Path,
                                     local_session: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A newer step whose manifest names a file outside its folder is not offered, and a
    download never writes outside `local_dir` (the shared checkpoint layout checks names)."""
    import boto3

    storage.upload_dir(layout / "run-1", f"s3://{s3_bucket}/ckpt/run-1")
    evil = "../../evil.txt"
    s3 = boto3.client("s3")
    s3.put_object(Bucket=s3_bucket, Key=f"ckpt/run-1/step-000000500/{evil}", Body=b"evil")
    s3.put_object(Bucket=s3_bucket, Key="ckpt/run-1/step-000000500/manifest.json",
                  Body=json.dumps({"step": 500, "files": {evil: {"size": 4}}}).encode())
    estimator = _estimator(src, local_session, f"s3://{s3_bucket}/ckpt/run-1")
    assert [c.step for c in estimator.checkpoints()] == [100, 200]
    assert "unsafe checkpoint manifest" in caplog.text
    target = estimator.download_checkpoint(tmp_path / "dl" / "here")
    assert target.name == "step-000000200"
    assert not list(tmp_path.rglob("evil.txt"))
