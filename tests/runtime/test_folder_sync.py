"""ddpjob_runtime.folder_sync and the runtime's checkpoint mirror, against file:// storage."""

from __future__ import annotations

import os
from pathlib import Path

from ddpjob_runtime.folder_sync import FolderSync
from ddpjob_runtime.mirrors import in_step_folder


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
    (local / ".model.abc.tmp").write_text("half-written")
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
        f"not syncing {local / 'leak'}: it links outside {local}"]
