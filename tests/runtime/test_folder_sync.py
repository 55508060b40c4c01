"""ddpjob_runtime.platform.folder_sync and the runtime's checkpoint mirror, against file:// storage
and S3 on a moto server (several hosts syncing to one URI)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from ddpjob_runtime.platform.folder_sync import FolderSync
from ddpjob_runtime.platform.mirrors import in_step_folder
from ddpjob_runtime.shared import storage, upload_stamps
from ddpjob_runtime.shared.upload_stamps import Writer

from tests.conftest import S3_ON_MOTO


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_plain_files_are_mirrored_and_step_folders_left_to_checkpoints(tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "remote"
    (local / "step-000000003").mkdir(parents=True)
    (local / "step-000000003" / "state.pt").write_text("state")
    (local / "sub").mkdir()
    (local / "sub" / "a.txt").write_text("a")
    (local / "model_epoch1.pt").write_text("m1")
    sync = FolderSync(local, remote.as_uri(), skip=in_step_folder)
    assert sync.upload() == 2
    assert _files(remote) == {"model_epoch1.pt": "m1", "sub/a.txt": "a"}
    assert sync.upload() == 0  # nothing changed: nothing sent again
    (local / "model_epoch1.pt").write_text("m1, longer")
    assert sync.upload() == 1
    assert _files(remote)["model_epoch1.pt"] == "m1, longer"


def test_download_brings_plain_files_only_and_counts_them_as_sent(tmp_path: Path) -> None:
    remote, local = tmp_path / "remote", tmp_path / "local"
    (remote / "step-000000001").mkdir(parents=True)
    (remote / "step-000000001" / "manifest.json").write_text("{}")
    (remote / "model_epoch1.pt").write_text("m1")
    sync = FolderSync(local, remote.as_uri(), skip=in_step_folder)
    assert sync.download() == 1
    assert _files(local) == {"model_epoch1.pt": "m1"}
    stamp = os.stat(remote / "model_epoch1.pt").st_mtime_ns
    assert sync.upload() == 0
    assert os.stat(remote / "model_epoch1.pt").st_mtime_ns == stamp


def test_in_step_folder() -> None:
    assert in_step_folder("step-000000100/state.pt")
    assert not in_step_folder("step-000000100")  # a plain file of that name
    assert not in_step_folder("step-1/state.pt")
    assert not in_step_folder("model.pt")


def test_links_out_of_the_folder_are_never_followed(tmp_path: Path, caplog) -> None:
    """A link to a file or a folder outside is not uploaded (warned about once); a link to a
    file inside is uploaded with that file's content."""
    local, remote, outside = tmp_path / "local", tmp_path / "remote", tmp_path / "outside"
    local.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("credentials")
    (local / "model.pt").write_text("m")
    (local / "leak").symlink_to(outside / "secret")
    (local / "leak-dir").symlink_to(outside)
    (local / "latest.pt").symlink_to(local / "model.pt")
    sync = FolderSync(local, remote.as_uri())
    assert sync.upload() == 2
    assert _files(remote) == {"latest.pt": "m", "model.pt": "m"}
    assert sync.upload() == 0
    assert [r.getMessage() for r in caplog.records if "links outside" in r.getMessage()] == [
        f"not syncing {local / 'leak'}: it links outside the folder",
        f"not syncing {local / 'leak-dir'}: it links outside the folder"]


# ----------------------------------------------------- several hosts syncing to one URI


def _clash_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "wrote different bytes" in r.getMessage()]


@pytest.fixture(params=["file", S3_ON_MOTO])
def shared_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The one checkpoint URI of a job's hosts: a local folder, or a prefix on the moto server."""
    if request.param == "file":
        probe = tmp_path / "xattr-probe"
        probe.touch()
        try:  # where the filesystem keeps no user attributes, local files go unstamped
            os.setxattr(probe, upload_stamps.XATTR, b"{}")
        except OSError as error:
            pytest.skip(f"{tmp_path}: no user extended attributes ({error.strerror})")
        return (tmp_path / "remote").as_uri()
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/ckpt/run"


def _host(tmp_path: Path, uri: str, host: str, job: str = "job-1") -> FolderSync:
    return FolderSync(tmp_path / host, uri, skip=in_step_folder, writer=Writer(job, host))


def test_every_host_uploads_its_own_files_and_same_bytes_once(
        tmp_path: Path, shared_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    """Shards of each host all arrive; a file both hosts wrote with the same bytes is sent
    once (the second host finds its bytes there: one HEAD, no upload) and warns no one."""
    one, two = _host(tmp_path, shared_uri, "algo-1"), _host(tmp_path, shared_uri, "algo-2")
    for sync, rank in ((one, 0), (two, 1)):
        sync.folder.mkdir()
        (sync.folder / f"shard-{rank}.bin").write_bytes(bytes([rank]) * 10)
        (sync.folder / "config.json").write_text('{"lr": 0.1}')
    one.upload()
    two.upload()
    listed = {i.key: i.size for i in storage.list_objects(shared_uri)}
    assert listed == {"config.json": 11, "shard-0.bin": 10, "shard-1.bin": 10}
    stamp = upload_stamps.read(storage.join(shared_uri, "config.json"))
    assert stamp is not None and stamp.writer == Writer("job-1", "algo-1")  # not sent again
    assert upload_stamps.read(storage.join(shared_uri, "shard-1.bin")).writer.host == "algo-2"
    assert _clash_warnings(caplog) == []


def test_different_bytes_from_two_hosts_are_warned_about_once(
        tmp_path: Path, shared_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    one, two = _host(tmp_path, shared_uri, "algo-1"), _host(tmp_path, shared_uri, "algo-2")
    for sync in (one, two):
        sync.folder.mkdir()
        (sync.folder / "same.txt").write_text(f"written by {sync.writer.host}")
    one.upload()
    assert _clash_warnings(caplog) == []
    two.upload()
    target = storage.join(shared_uri, "same.txt")
    assert _clash_warnings(caplog) == [
        f"hosts algo-1 and algo-2 wrote different bytes to {target}; the last upload "
        f"(algo-2's) is kept there, as SageMaker keeps the last writer's"]
    assert storage.read_bytes(target) == b"written by algo-2"
    # Either host writing it again (the other one's bytes there) is the same clash: not again.
    (one.folder / "same.txt").write_text("algo-1, later")
    one.upload()
    (two.folder / "same.txt").write_text("algo-2, later")
    two.upload()
    assert len(_clash_warnings(caplog)) == 1
    assert storage.read_bytes(target) == b"algo-2, later"


def test_a_host_overwriting_its_own_file_or_an_earlier_jobs_warns_no_one(
        tmp_path: Path, shared_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    earlier = _host(tmp_path, shared_uri, "algo-2", job="job-0")
    earlier.folder.mkdir()
    (earlier.folder / "model.pt").write_text("job 0")
    earlier.upload()
    resumed = _host(tmp_path, shared_uri, "algo-1", job="job-1")
    assert resumed.download() == 1
    for text in ("job 1, epoch 1", "job 1, epoch 2, longer"):
        (resumed.folder / "model.pt").write_text(text)
        assert resumed.upload() == 1
        assert storage.read_bytes(storage.join(shared_uri, "model.pt")) == text.encode()
    assert _clash_warnings(caplog) == []


def test_an_unstamped_object_is_overwritten_without_a_warning(
        tmp_path: Path, shared_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    """What ddpjob's sync did not upload (a user's own copy) names no writer: no clash."""
    source = tmp_path / "users-own.txt"
    source.write_text("put there by hand")
    storage.upload_file(source, storage.join(shared_uri, "notes.txt"))
    sync = _host(tmp_path, shared_uri, "algo-2")
    sync.folder.mkdir()
    (sync.folder / "notes.txt").write_text("the job's")
    assert sync.upload() == 1
    assert storage.read_bytes(storage.join(shared_uri, "notes.txt")) == b"the job's"
    assert _clash_warnings(caplog) == []


def test_a_clash_both_hosts_uploaded_at_once_is_warned_about_at_the_finish(
        tmp_path: Path, shared_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    """algo-2 uploaded without seeing algo-1's stamp (both read the name before either
    wrote): algo-1's finish looks at what it left there once more and warns, once."""
    one = _host(tmp_path, shared_uri, "algo-1")
    one.folder.mkdir()
    (one.folder / "same.txt").write_text("algo-1's")
    one.upload()
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("algo-2's")
    target = storage.join(shared_uri, "same.txt")
    upload_stamps.upload(theirs, target, upload_stamps.Stamp(
        Writer("job-1", "algo-2"), storage.sha256_file(theirs)))
    assert _clash_warnings(caplog) == []
    assert one.finish() == 0
    assert _clash_warnings(caplog) == [
        f"hosts algo-1 and algo-2 wrote different bytes to {target}; the last upload "
        f"(algo-2's) is kept there, as SageMaker keeps the last writer's"]
    assert storage.read_bytes(target) == b"algo-2's"


def test_the_finish_of_a_host_whose_bytes_stayed_warns_no_one(
        tmp_path: Path, shared_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    one, two = _host(tmp_path, shared_uri, "algo-1"), _host(tmp_path, shared_uri, "algo-2")
    for sync in (one, two):
        sync.folder.mkdir()
        (sync.folder / "config.json").write_text("{}")
        (sync.folder / f"{sync.writer.host}.txt").write_text(sync.writer.host)
        assert sync.finish() == 2
    assert one.finish() == two.finish() == 0
    assert _clash_warnings(caplog) == []
