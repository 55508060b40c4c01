"""ddpjob_runtime.checkpoints: atomic rank-0 saves, background upload to moto, restore, pruning."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ddpjob_runtime import checkpoints
from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.shared import storage
from ddpjob_runtime.shared.errors import StorageError

from tests.conftest import S3_ON_MOTO


@pytest.fixture
def ckpt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Rank 0 with a local checkpoint folder and no upload; drains the writer afterwards."""
    folder = tmp_path / "checkpoints"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(folder))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("DDPJOB_CHECKPOINT_URI", raising=False)
    yield folder
    with contextlib.suppress(StorageError):
        checkpoints.flush()


def _state(value: float, n: int = 1000) -> dict:
    model = torch.nn.Linear(n // 10, 10)
    with torch.no_grad():
        model.weight.fill_(value)
    return {"model": model.state_dict(), "step": int(value), "extra": [torch.ones(3) * value]}


def test_round_trip_and_upload(ckpt: Path, s3_bucket: str, monkeypatch) -> None:
    uri = f"s3://{s3_bucket}/ckpt/run-1"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", uri)
    assert checkpoints.load_latest() is None
    state = _state(1.0)
    assert checkpoints.save(state, step=100) is True
    state["model"]["weight"].fill_(9.0)  # training goes on: the snapshot must not change
    checkpoints.flush()

    loaded = checkpoints.load_latest()
    assert loaded["step"] == 1
    assert torch.equal(loaded["model"]["weight"], torch.full((10, 100), 1.0))
    assert hasattr(loaded["model"], "_metadata")  # state_dict versions survive the snapshot
    manifest = json.loads((ckpt / "step-000000100" / "manifest.json").read_text())
    assert manifest["step"] == 100
    size = (ckpt / "step-000000100" / "state.pt").stat().st_size
    assert manifest["files"]["state.pt"]["size"] == size
    assert sorted(o.key for o in storage.list_objects(uri)) == [
        "step-000000100/manifest.json", "step-000000100/state.pt"]
    assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]  # no temp files left

    # the bootstrap of the next run brings it back into an empty folder
    restored = ckpt.parent / "restored"
    assert checkpoint_restore.restore_latest(uri, restored) == 100
    assert (restored / "step-000000100" / "state.pt").read_bytes() == (
        ckpt / "step-000000100" / "state.pt").read_bytes()


def test_other_ranks_write_nothing(ckpt: Path, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "3")
    assert checkpoints.save({"x": torch.ones(2)}) is False
    checkpoints.flush()
    assert not ckpt.exists()


def test_saves_without_a_checkpoint_uri_say_once_that_they_stay_here(
        ckpt: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="ddpjob_runtime.checkpoints"):
        for step in range(3):
            assert checkpoints.save({"x": torch.ones(2) * step})
        checkpoints.flush()
    said = [r.getMessage() for r in caplog.records if "no checkpoint_s3_uri" in r.getMessage()]
    assert len(said) == 1 and str(ckpt) in said[0], caplog.text


def test_step_numbering_and_keep(ckpt: Path, s3_bucket: str, monkeypatch) -> None:
    uri = f"s3://{s3_bucket}/ckpt/run-2"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", uri)
    for i in range(5):
        checkpoints.save({"i": torch.tensor(i)}, keep=2)
    checkpoints.flush()
    assert checkpoints.complete_steps(ckpt) == [3, 4]
    assert {o.key.split("/")[0] for o in storage.list_objects(uri)} == {
        "step-000000003", "step-000000004"}
    assert checkpoints.load_latest()["i"].item() == 4
    checkpoints.save({"i": torch.tensor(10)}, step=10, keep=2)
    checkpoints.save({"i": torch.tensor(11)}, keep=2)
    checkpoints.flush()
    assert checkpoints.complete_steps(ckpt) == [10, 11]


def test_incomplete_checkpoints_are_ignored(ckpt: Path) -> None:
    checkpoints.save({"v": 1}, step=1)
    checkpoints.flush()
    # a newer step without manifest, and one whose file is shorter than its manifest says
    (ckpt / "step-000000002").mkdir()
    torch.save({"v": 2}, ckpt / "step-000000002" / "state.pt")
    (ckpt / "step-000000003").mkdir()
    torch.save({"v": 3}, ckpt / "step-000000003" / "state.pt")
    (ckpt / "step-000000003" / "manifest.json").write_text(json.dumps(
        {"step": 3, "time": 0, "files": {"state.pt": {"size": 10**9, "sha256": "0"}}}))
    assert checkpoints.complete_steps(ckpt) == [1]
    assert checkpoints.load_latest() == {"v": 1}


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(data))


def test_corrupt_checkpoint_names_the_path(ckpt: Path) -> None:
    checkpoints.save({"v": torch.arange(100)}, step=5)
    checkpoints.flush()
    path = ckpt / "step-000000005" / "state.pt"
    _corrupt(path)
    with pytest.raises(checkpoints.CheckpointError, match=f"no checkpoint verifies: {path} "):
        checkpoints.load_latest()
    (ckpt / "step-000000005" / "manifest.json").write_text("{not json")
    with pytest.raises(StorageError, match="manifest.json: unreadable checkpoint manifest"):
        checkpoints.load_latest()


def test_a_corrupt_newest_checkpoint_falls_back_to_the_newest_that_verifies(
        ckpt: Path, s3_bucket: str, monkeypatch, caplog) -> None:
    """Locally and when restoring from S3 (a spot restart): the corrupt newest one is named in
    a warning, never loaded, and the job resumes from the one before."""
    uri = f"s3://{s3_bucket}/ckpt/spot"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", uri)
    for step in (1, 2, 3):
        checkpoints.save({"v": step}, step=step)
    checkpoints.flush()
    bad = ckpt / "step-000000003" / "state.pt"
    _corrupt(bad)
    assert checkpoints.load_latest() == {"v": 2}
    assert f"skipping corrupt checkpoint {bad} " in caplog.text
    storage.upload_file(bad, f"{uri}/step-000000003/state.pt")  # the copy on S3 too
    local = ckpt.parent / "after-spot"
    assert checkpoint_restore.restore_latest(uri, local) == 2
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(local))
    assert checkpoints.load_latest() == {"v": 2}
    assert f"skipping corrupt checkpoint {local / 'step-000000003' / 'state.pt'} " in caplog.text


def test_unpicklable_with_weights_only_is_clear(ckpt: Path) -> None:
    checkpoints.save({"obj": Path("/x")}, step=1)
    checkpoints.flush()
    with pytest.raises(checkpoints.CheckpointError, match="state.pt: unreadable checkpoint"):
        checkpoints.load_latest()
    assert checkpoints.load_latest(weights_only=False) == {"obj": Path("/x")}


def test_restore_picks_latest_complete_and_ignores_siblings(ckpt: Path, s3_bucket: str,
                                                             monkeypatch) -> None:
    base = f"s3://{s3_bucket}/ckpt"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", f"{base}/run-10")
    checkpoints.save({"run": 10}, step=50)
    checkpoints.flush()
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", f"{base}/run-1/")
    checkpoints.save({"run": 1}, step=7)
    checkpoints.flush()
    # a newer step on S3 whose manifest arrived but whose file is short: not complete
    tmp = ckpt.parent / "fake"
    tmp.mkdir()
    (tmp / "state.pt").write_bytes(b"short")
    (tmp / "manifest.json").write_text(json.dumps(
        {"step": 8, "time": 0, "files": {"state.pt": {"size": 999, "sha256": "0"}}}))
    storage.upload_dir(tmp, f"{base}/run-1/step-000000008")

    local = ckpt.parent / "restore"
    assert checkpoint_restore.restore_latest(f"{base}/run-1", local) == 7
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(local))
    assert checkpoints.load_latest() == {"run": 1}
    assert checkpoint_restore.restore_latest(f"{base}/run-1", local) == 7  # idempotent
    assert checkpoint_restore.restore_latest(f"{base}/run-3", ckpt.parent / "none") is None


def test_restore_from_file_uri(ckpt: Path, tmp_path: Path, monkeypatch) -> None:
    remote = tmp_path / "remote"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", remote.as_uri())
    checkpoints.save({"v": 3}, step=3)
    checkpoints.flush()
    assert (remote / "step-000000003" / "manifest.json").exists()
    assert checkpoint_restore.restore_latest(remote.as_uri(), tmp_path / "r") == 3


def test_failed_upload_fails_flush(ckpt: Path, aws_env: str, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", "s3://no-such-bucket-ckpt/run")
    checkpoints.save({"v": 1}, step=1)
    with pytest.raises(StorageError, match="s3://no-such-bucket-ckpt/run/step-000000001.*"
                                           "no such bucket"):
        checkpoints.flush()
    checkpoints.flush()  # reported once
    assert checkpoints.complete_steps(ckpt) == [1]  # the local copy is intact


def test_failed_upload_surfaces_at_next_save(ckpt: Path, aws_env: str, monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", "s3://no-such-bucket-ckpt/run")
    checkpoints.save({"v": 1}, step=1)
    with pytest.raises(StorageError, match="no such bucket"):
        checkpoints.save({"v": 2}, step=2)


@pytest.mark.parametrize("store", ["file", S3_ON_MOTO])
@pytest.mark.parametrize("hostile", ["absolute", "dotdot"])
def test_restore_refuses_a_hostile_manifest(ckpt: Path, tmp_path: Path, request,
                                            monkeypatch, store: str, hostile: str) -> None:
    """A newer checkpoint whose manifest names files outside its folder is skipped with a
    warning; nothing is written outside the checkpoint folder (issue 9)."""
    if store == "s3":
        remote = f"s3://{request.getfixturevalue('s3_bucket')}/ckpt/run-1"
    else:
        remote = (tmp_path / "remote").as_uri()
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", remote)
    checkpoints.save({"v": 3}, step=3)
    checkpoints.flush()
    outside = tmp_path / "outside" / "evil.txt"
    name = str(outside) if hostile == "absolute" else "../../outside/evil.txt"
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "manifest.json").write_text(json.dumps(
        {"step": 5, "time": 0, "files": {name: {"size": 4, "sha256": "0"}}}))
    step5 = storage.join(remote, "step-000000005")
    storage.upload_file(fake / "manifest.json", storage.join(step5, "manifest.json"))
    if store == "s3":  # S3 keys may hold '//' and '..': the listing then 'completes' the step
        import boto3

        location = storage.parse(step5)
        boto3.client("s3").put_object(Bucket=location.bucket,
                                      Key=f"{location.key}/{name}", Body=b"evil")
    local = tmp_path / "restore" / "checkpoints"
    assert checkpoint_restore.restore_latest(remote, local) == 3  # the hostile step 5 is ignored
    assert not outside.exists()
    written = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert {p for p in written if p.is_relative_to(tmp_path / "restore")} == {
        local / "step-000000003" / "state.pt", local / "step-000000003" / "manifest.json"}


def test_load_latest_refuses_a_hostile_local_manifest(ckpt: Path) -> None:
    checkpoints.save({"v": 1}, step=1)
    checkpoints.flush()
    manifest = ckpt / "step-000000001" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"]["/etc/hostname"] = {"size": Path("/etc/hostname").stat().st_size}
    manifest.write_text(json.dumps(data))
    with pytest.raises(checkpoints.CheckpointError, match="unsafe checkpoint manifest"):
        checkpoints.load_latest()


@pytest.mark.parametrize("local_path", [None, "/opt/ml/checkpoints/run"])
def test_on_sagemakers_own_container_checkpoints_live_in_the_synced_folder(
        tmp_path: Path, monkeypatch, local_path: str | None) -> None:
    """No ddpjob runtime (no DDPJOB_CHECKPOINT_*): the folder is checkpointconfig.json's
    LocalPath, which SageMaker syncs with S3Uri itself; save() uploads nothing of its own and
    load_latest() reads what SageMaker brought down. (A root other than /opt/ml is a local
    host: a LocalPath outside /opt/ml is refused there, tests/runtime/test_environment.py.)"""
    root = tmp_path / "ml"
    for name in ("DDPJOB_CHECKPOINT_DIR", "DDPJOB_CHECKPOINT_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(root))
    monkeypatch.setenv("RANK", "0")
    config = {"S3Uri": "s3://no-such-bucket-sagemaker-syncs-it/ckpt"}  # we never upload there
    if local_path is not None:
        config["LocalPath"] = local_path
    (root / "input" / "config").mkdir(parents=True)
    (root / "input" / "config" / "checkpointconfig.json").write_text(json.dumps(config))
    expected = {None: root / "checkpoints",
                "/opt/ml/checkpoints/run": root / "checkpoints" / "run"}[local_path]
    assert checkpoints.checkpoint_dir() == expected
    assert checkpoints.load_latest() is None
    # What SageMaker brought down from S3Uri (a previous job's checkpoint) is found...
    previous = tmp_path / "previous"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(previous))
    checkpoints.save({"v": 4}, step=4)
    checkpoints.flush()
    monkeypatch.delenv("DDPJOB_CHECKPOINT_DIR")
    expected.mkdir(parents=True, exist_ok=True)
    (previous / "step-000000004").rename(expected / "step-000000004")
    assert checkpoints.load_latest() == {"v": 4}
    # ...and a new save lands beside it, with no upload of ours (the bucket does not exist).
    assert checkpoints.save({"v": 5})
    checkpoints.flush()
    assert checkpoints.complete_steps() == [4, 5]
    assert checkpoints.load_latest() == {"v": 5}
