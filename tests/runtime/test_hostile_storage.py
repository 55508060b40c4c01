"""Hostile input to storage, the folder sync and the checkpoint restore: file names S3 takes
that look like URL escapes, paths or temp files; links and pipes in a folder that is read;
keys with '//'; forged stamps; a folder swapped for a link in the middle of a sync. Against
file:// folders and S3 on a moto server."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.platform.folder_sync import FolderSync
from ddpjob_runtime.platform.mirrors import in_step_folder
from ddpjob_runtime.shared import fsutil, safefiles, storage, upload_stamps
from ddpjob_runtime.shared.errors import InvalidURIError, StorageError
from ddpjob_runtime.shared.upload_stamps import Stamp, Writer

from tests.conftest import S3_ON_MOTO

#: Legal file names and S3 keys, each once a way to lose a file (or the job).
HOSTILE = ["%2E%2E%2Frun-2%2Fmodel.pt", "a%2Fb.txt", "%00nul.txt", "new\nline.txt", "x" * 246,
           ".notes.abcd1234.tmp", "sp ace #1?.txt", "100%.txt"]


@pytest.fixture(params=["file", S3_ON_MOTO])
def runs(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The folder that holds a job's checkpoint folder `run-1` and a sibling job's `run-2`."""
    if request.param == "file":
        return (tmp_path / "store with space").as_uri()
    return f"s3://{request.getfixturevalue('s3_bucket')}/ckpt"


def _sync(folder: Path, uri: str, job: str) -> FolderSync:
    return FolderSync(folder, uri, skip=in_step_folder, writer=Writer(job, "algo-1"))


def test_every_name_s3_takes_is_synced_and_restored_under_its_own_name(
        tmp_path: Path, runs: str) -> None:
    """No name is decoded, normalised, cut or taken for a temp file: each reaches the store
    under its own name, the sibling run's checkpoint is untouched, and the next job restores
    each under its name."""
    sibling = tmp_path / "sibling.pt"
    sibling.write_text("run-2's")
    storage.upload_file(sibling, storage.join(runs, "run-2", "model.pt"))
    run = storage.join(runs, "run-1")
    names = [n for n in HOSTILE if runs.startswith("file:") or "\n" not in n]  # moto: no \n
    first = _sync(tmp_path / "host", run, "job-1")
    first.folder.mkdir()
    for name in names:
        (first.folder / name).write_text(f"bytes of {name!r}")
    assert first.upload() == len(names)
    assert sorted(info.key for info in storage.list_objects(run)) == sorted(names)
    assert storage.read_bytes(storage.join(runs, "run-2", "model.pt")) == b"run-2's"
    following = _sync(tmp_path / "next", run, "job-2")
    assert following.download() == len(names)
    assert {p.name: p.read_text() for p in following.folder.iterdir()} == {
        name: f"bytes of {name!r}" for name in names}


def test_a_file_uri_names_its_folder_as_written_or_encoded(tmp_path: Path) -> None:
    """The folder part of a file:// URI a user writes is decoded (`Path.as_uri()` encodes a
    space as %20); a name joined below it is never."""
    folder = tmp_path / "with space" / "100%"
    assert storage.parse(folder.as_uri()).path == folder
    assert storage.parse(storage.join(folder.as_uri(), "a%2Fb.txt")).path == folder / "a%2Fb.txt"
    assert storage.parse(storage.join(folder.as_uri(), "new\nline#?")).path == \
        folder / "new\nline#?"
    assert storage.parse(storage.join(folder.as_uri(), "sub/x.pt")).path == folder / "sub/x.pt"


def test_one_failing_file_costs_the_round_none_of_the_others(tmp_path: Path) -> None:
    """A file the store cannot take (a folder there has its name) is logged and tried again
    next round; every other file of the round is uploaded, then the round reports it."""
    remote = tmp_path / "remote"
    (remote / "a-blocked.txt").mkdir(parents=True)
    sync = FolderSync(tmp_path / "local", remote.as_uri())
    sync.folder.mkdir()
    for name in ("a-blocked.txt", "b.txt", "c.txt"):
        (sync.folder / name).write_text(name)
    with pytest.raises(StorageError, match=r"upload of 1 file\(s\) .* 'a-blocked.txt'"):
        sync.upload()
    assert sorted(os.listdir(remote)) == ["a-blocked.txt", "b.txt", "c.txt"]
    assert (remote / "c.txt").read_text() == "c.txt"
    (remote / "a-blocked.txt").rmdir()
    assert sync.upload() == 1  # tried again, alone
    assert (remote / "a-blocked.txt").read_text() == "a-blocked.txt"


def test_a_folder_swapped_for_a_link_during_a_sync_is_not_read_through(tmp_path: Path) -> None:
    """The rank swaps `sub/` for a link out of the folder after the sync listed `sub/a.txt`
    (here: while the sync looks at a later name, `zz/z.txt`): the file is opened below the
    folder, no link followed, so the outside bytes are never uploaded."""
    local, remote, outside = tmp_path / "local", tmp_path / "remote", tmp_path / "outside"
    (local / "sub").mkdir(parents=True)
    (local / "sub" / "a.txt").write_text("mine")
    (local / "zz").mkdir()
    (local / "zz" / "z.txt").write_text("z")
    outside.mkdir()
    (outside / "a.txt").write_text("secret")

    def swap_when_listing_z(rel: str) -> bool:
        if rel == "zz/z.txt" and not (local / "sub").is_symlink():
            (local / "sub").rename(local / "sub-was")
            (local / "sub").symlink_to(outside)
        return False

    sync = FolderSync(local, remote.as_uri(), skip=swap_when_listing_z)
    with pytest.raises(StorageError, match="sub/a.txt"):
        sync.upload()
    assert not (remote / "sub" / "a.txt").exists()
    assert (remote / "zz" / "z.txt").read_text() == "z"


def test_safefiles_open_refuses_links_out_and_pipes_never_blocks(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "x").write_text("x")
    (folder / "in").symlink_to(folder / "sub" / "x")
    (folder / "out").symlink_to(tmp_path)
    (tmp_path / "secret").write_text("secret")
    os.mkfifo(folder / "fifo")
    with safefiles.open_file(folder, "in") as handle:
        assert handle.read() == b"x"
    for rel in ("out/secret", "fifo"):
        with pytest.raises(OSError):
            safefiles.open_file(folder, rel)
    assert set(safefiles.scan(folder).files) == {"in", "sub/x"}


def test_a_temp_file_is_left_out_while_written_and_a_users_of_that_shape_is_not(
        tmp_path: Path) -> None:
    store = tmp_path / "store"
    with fsutil.atomic_open(store / "model.pt") as handle:
        handle.write(b"half")
        assert storage.list_objects(store.as_uri()) == []
    (store / ".model.pt.abcd1234.tmp").write_text("a user's")
    assert [info.key for info in storage.list_objects(store.as_uri())] == [
        ".model.pt.abcd1234.tmp", "model.pt"]


def test_a_name_over_name_max_less_the_temp_part_is_written_atomically(tmp_path: Path) -> None:
    fsutil.write_text(tmp_path / ("n" * 255), "long")
    assert (tmp_path / ("n" * 255)).read_text() == "long"


# ----------------------------------------------------------------- restoring a file:// folder


def _checkpoint(folder: Path, step: int, files: dict[str, bytes]) -> None:
    """A checkpoint's manifest in `folder/step-.../`, naming `files` (written by the caller)."""
    step_dir = folder / f"step-{step:09d}"
    step_dir.mkdir(parents=True, exist_ok=True)
    fsutil.write_json(step_dir / "manifest.json", {"step": step, "files": {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in files.items()}})


def test_restoring_never_follows_a_link_out_nor_waits_on_a_pipe(tmp_path: Path) -> None:
    """Step 3's state is a link to a file outside (its manifest matches those bytes), step 2's
    a named pipe: both are left out, and step 1, whole, is restored."""
    ckpt, outside = tmp_path / "team" / "run", tmp_path / "private.bin"
    outside.write_bytes(b"root-only bytes")
    _checkpoint(ckpt, 1, {"state.pt": b"one"})
    (ckpt / "step-000000001" / "state.pt").write_bytes(b"one")
    _checkpoint(ckpt, 2, {"state.pt": b""})
    os.mkfifo(ckpt / "step-000000002" / "state.pt")
    _checkpoint(ckpt, 3, {"state.pt": b"root-only bytes"})
    (ckpt / "step-000000003" / "state.pt").symlink_to(outside)
    local = tmp_path / "local"
    assert checkpoint_restore.restore_latest(ckpt.as_uri(), local) == 1
    assert sorted(p.name for p in local.iterdir()) == ["step-000000001"]
    assert (local / "step-000000001" / "state.pt").read_bytes() == b"one"


# ----------------------------------------------------------------- keys with '//'


def test_keys_are_joined_whole() -> None:
    assert storage.join("s3://b/ds/", "/train.csv") == "s3://b/ds//train.csv"
    assert storage.join("s3://b/out//", "job", "output") == "s3://b/out/job/output"
    assert storage.join("s3://b/ckpt", "a%2Fb.txt") == "s3://b/ckpt/a%2Fb.txt"


def test_a_key_no_file_can_be_named_after_costs_no_other_file(tmp_path: Path,
                                                               s3_bucket: str) -> None:
    """`ckpt/run//x` and `ckpt/run/../y` are keys S3 keeps; no file below the checkpoint folder
    can have their names: they stay there, warned about, and every other file comes down."""
    s3 = storage.client()
    for key in ("ckpt/run//x", "ckpt/run/../y", "ckpt/run/ok.txt"):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=key.encode())
    sync = _sync(tmp_path / "host", f"s3://{s3_bucket}/ckpt/run", "job-1")
    assert sync.download() == 1
    assert [p.name for p in sync.folder.iterdir()] == ["ok.txt"]


@pytest.mark.parametrize("key", ["ds//train.csv", "out//", "./x", "a/../b", "a\\b"])
def test_a_local_bucket_key_a_folder_cannot_keep_apart_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """`ds//train.csv` is its own key in the local bucket; as a path it would read
    `ds/train.csv`: the job gets one clear error instead of another object's bytes."""
    monkeypatch.setenv("DDPJOB_LOCAL_BUCKET", str(tmp_path / "bucket"))
    with pytest.raises(InvalidURIError, match=r"output_path s3://sagemaker-local/.*cannot keep"):
        storage.parse(f"s3://sagemaker-local/{key}", argument="output_path")
    assert storage.parse("s3://sagemaker-local/ds/").path == tmp_path / "bucket" / "ds"


# ----------------------------------------------------------------- stamps are no proof


@pytest.fixture(params=["file", S3_ON_MOTO])
def stamped_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        probe = tmp_path / "xattr-probe"
        probe.touch()
        try:
            os.setxattr(probe, upload_stamps.XATTR, b"{}")
        except OSError as error:
            pytest.skip(f"{tmp_path}: no user extended attributes ({error.strerror})")
        return (tmp_path / "remote").as_uri()
    return f"s3://{request.getfixturevalue('s3_bucket')}/ckpt/run"


def test_a_forged_stamp_does_not_stop_a_hosts_upload(tmp_path: Path, stamped_uri: str) -> None:
    """Other bytes stamped with the sha256 of this host's file (a forged or stale stamp): the
    host uploads its bytes all the same, so the next attempt restores them."""
    mine = b"algo-1's shard"
    forged = tmp_path / "forged.bin"
    forged.write_bytes(b"someone else's")
    target = storage.join(stamped_uri, "shard.bin")
    upload_stamps.upload(forged, target, Stamp(Writer("job-1", "algo-2"),
                                                hashlib.sha256(mine).hexdigest()))
    sync = FolderSync(tmp_path / "host", stamped_uri, writer=Writer("job-1", "algo-1"))
    sync.folder.mkdir()
    (sync.folder / "shard.bin").write_bytes(mine)
    assert sync.upload() == 1
    assert storage.read_bytes(target) == mine


def test_a_true_stamp_still_spares_the_upload(tmp_path: Path, stamped_uri: str) -> None:
    theirs = tmp_path / "theirs.bin"
    theirs.write_bytes(b"same bytes")
    target = storage.join(stamped_uri, "same.bin")
    stamp = Stamp(Writer("job-1", "algo-2"), storage.sha256_file(theirs))
    upload_stamps.upload(theirs, target, stamp)
    sync = FolderSync(tmp_path / "host", stamped_uri, writer=Writer("job-1", "algo-1"))
    sync.folder.mkdir()
    (sync.folder / "same.bin").write_bytes(b"same bytes")
    sync.upload()
    assert upload_stamps.read(target).writer.host == "algo-2"  # not sent again


def test_a_multipart_etag_is_predicted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       s3_bucket: str) -> None:
    """Above the multipart threshold the ETag S3 gives is computed from the parts too."""
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_THRESHOLD", str(5 * 1024 * 1024))
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_CHUNKSIZE", str(5 * 1024 * 1024))
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(11 * 1024 * 1024))
    uri = f"s3://{s3_bucket}/big.bin"
    storage.upload_file(big, uri)
    head = storage.client().head_object(Bucket=s3_bucket, Key="big.bin")
    with open(big, "rb") as handle:
        assert storage.s3.expected_etag(handle) == head["ETag"]
    assert head["ETag"].endswith('-3"')
