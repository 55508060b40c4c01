"""The local jobs' home: ddpjob never changes the mode of a folder it did not create, and
refuses one that every user may write into (or that another user owns)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from ddpjob.cli import main
from ddpjob.errors import UserInputError
from ddpjob.local.base.jobstore import JobStore
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


def _nobody() -> int:
    import pwd

    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    return pwd.getpwnam("nobody").pw_uid


def test_a_home_reached_through_another_users_link_is_refused(tmp_path: Path) -> None:
    """The link's owner could point it anywhere, later: at a folder they read."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(mine)
    os.lchown(link, _nobody(), -1)
    for home in (link, link / "ddpjob"):
        with pytest.raises(UserInputError, match=r"reached through the link .*link, which another "
                                                 r"user owns"):
            LocalSession(home=home)
        with pytest.raises(UserInputError, match="another user owns"):
            JobStore(home).reserve("job-1")
    assert not list(mine.iterdir())
    own_link = tmp_path / "own-link"
    own_link.symlink_to(mine)
    LocalSession(home=own_link / "ddpjob")  # a link of one's own is fine


def test_a_home_below_a_folder_others_may_replace_it_in_is_refused(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)  # no sticky bit: anyone may rename what is in it
    with pytest.raises(UserInputError, match=r"below .*open, a folder every user may write into "
                                             r"\(mode 777, no sticky bit\)"):
        LocalSession(home=open_folder / "me" / "ddpjob")
    os.chmod(open_folder, 0o1777)  # as /tmp: others cannot rename what is not theirs
    LocalSession(home=open_folder / "me" / "ddpjob")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, _nobody(), -1)
    with pytest.raises(UserInputError, match=r"through the folder .*theirs, which another user"):
        LocalSession(home=theirs / "ddpjob")
