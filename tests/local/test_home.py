"""The local jobs' home: ddpjob never changes the mode of a folder it did not create, and
refuses one that every user may write into (or that another user owns)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from ddpjob.cli import main
from ddpjob.errors import UserInputError
from ddpjob.local.jobstore import JobStore
from ddpjob.local.session import LocalSession


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_shared_folder_is_refused_and_left_as_it_is(tmp_path: Path, capsys,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(UserInputError, match=r"home .*shared: a folder every user may write "
                                             r"into \(mode 1777\)"):
        LocalSession(home=shared)
    config = tmp_path / "config.yaml"
    config.write_text(f"home: {shared}\n")
    monkeypatch.setenv("DDPJOB_CONFIG", str(config))
    assert main(["jobs", "list"]) == 2
    err = capsys.readouterr().err
    assert "a folder every user may write into" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(UserInputError, match="every user may write"):
        JobStore(shared).reserve("job-1")  # a store built without a session checks too
    assert _mode(shared) == 0o1777 and not list(shared.iterdir())


def test_an_own_folder_keeps_its_mode_and_new_folders_are_private(tmp_path: Path) -> None:
    home = tmp_path / "mine"
    home.mkdir()
    os.chmod(home, 0o755)
    JobStore(LocalSession(home=home).home).reserve("job-1")
    assert _mode(home) == 0o755
    assert _mode(home / "jobs") == 0o700 and _mode(home / "jobs" / "job-1") == 0o700
    fresh = tmp_path / "new" / "home"
    JobStore(fresh).reserve("job-2")
    assert _mode(fresh) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user needs root")
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UserInputError, match=r"belongs to another user \(uid 65534\)"):
        LocalSession(home=theirs)
    assert _mode(theirs) == 0o755
