"""The containers' fixed rendezvous port: one job holds it, the next waits its turn, visibly.

The lock is a real `flock` on a file of a temporary folder; only the clock is a fake (a job may
not be pending less than SageMaker's minimum MaxPendingTimeInSeconds, 1,800 s).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddpjob.errors import UserInputError
from ddpjob.local.isolation import fixed_port
from ddpjob.local.isolation.fixed_port import PortLock, wait_for
from ddpjob.local.session import LocalSession

from tests.local.conftest import training_request


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_second_job_waits_naming_the_first_and_takes_the_port_once_it_is_free(
        tmp_path: Path) -> None:
    first, second = PortLock("job-a", folder=tmp_path), PortLock("job-b", folder=tmp_path)
    assert first.try_take() is None
    said: list[str] = []
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 3:  # the first job ended
            first.release()

    waited = wait_for(second, None, lambda: False, said.append, clock, sleep)
    assert waited.taken and said == ["waiting for port 7777, held by job job-a"]
    assert first.try_take() == "job-b"  # now the second holds it, and says so
    second.release()
    assert first.try_take() is None


def test_pending_past_the_limit_or_a_stop_ends_the_wait(tmp_path: Path) -> None:
    holder = PortLock("job-a", folder=tmp_path)
    assert holder.try_take() is None
    clock = FakeClock()
    waited = wait_for(PortLock("job-b", folder=tmp_path), 1800, lambda: False, lambda _: None,
                      clock, clock.sleep)
    assert not waited.taken and not waited.stopped and waited.pending_s >= 1800
    stopped = wait_for(PortLock("job-c", folder=tmp_path), None, lambda: True, lambda _: None,
                       clock, clock.sleep)
    assert stopped.stopped and not stopped.taken


def test_a_lock_whose_holder_died_is_free(tmp_path: Path) -> None:
    """flock ends with its holder's descriptor: a killed supervisor blocks nobody."""
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            f"from pathlib import Path\nfrom ddpjob.local.isolation.fixed_port import PortLock\n"
            f"assert PortLock('dead', folder=Path({str(tmp_path)!r})).try_take() is None\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert PortLock("alive", folder=tmp_path).try_take() is None


def test_the_holder_of_a_port_is_named() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not fixed_port.port_free(port)
        assert fixed_port.holder(port).startswith(f"pid {os.getpid()} (")


@pytest.fixture
def shared_home() -> Iterator[Path]:
    """A HOME every user may write into, as `/tmp` (mode 1777), that `nobody` can reach."""
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("acting as another user needs root (and the system's Python)")
    folder = Path(tempfile.mkdtemp(prefix="ddpjob-shared-home-"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder)


def _as_nobody(code: str) -> None:
    def become_nobody() -> None:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    # the system's Python: nobody may not read the test's virtual environment
    subprocess.run(["/usr/bin/python3", "-I", "-c", code], check=True, timeout=60, cwd="/",
                   preexec_fn=become_nobody)


def test_a_lock_folder_another_user_prepared_in_a_shared_home_is_refused(
        shared_home: Path, session: LocalSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """With HOME=/tmp, `nobody` makes `$HOME/.cache/ddpjob` first, its lock file a link to a
    file of ours (which the supervisor would overwrite) or a file they hold the lock of (our
    jobs would wait, showing what they wrote): the folder is refused as a home would be."""
    victim = shared_home / "precious"
    victim.write_text("precious")
    os.chmod(victim, 0o644)
    _as_nobody(f"import os; folder = {str(shared_home / '.cache' / 'ddpjob')!r}\n"
               f"os.makedirs(folder, mode=0o777)\n"
               f"os.symlink({str(victim)!r}, folder + '/port-7777.lock')\n")
    monkeypatch.setenv("HOME", str(shared_home))
    refusal = (r"the fixed port's lock folder .*/\.cache/ddpjob: reached through the folder "
               r".*/\.cache, which another user owns \(uid 65534\)")
    with pytest.raises(UserInputError, match=refusal):
        PortLock("job-a").try_take()
    assert victim.read_text() == "precious"
    # a job on the port is refused as it is created, before anything of it is written
    request = training_request(session, "on-the-port", "file:///tmp/sourcedir.tar.gz",
                               "train.py", hosts=2)
    request["AlgorithmSpecification"]["ContainerEntrypoint"] = ["/bin/true"]
    with pytest.raises(UserInputError, match=refusal):
        session.sagemaker_client.create_training_job(**request)
    assert session.list() == [] and victim.read_text() == "precious"


def test_a_lock_folder_of_ones_own_in_a_shared_home_is_private(
        shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(shared_home))
    lock = PortLock("job-a")
    assert lock.try_take() is None
    assert lock.path.parent == shared_home / ".cache" / "ddpjob"
    assert os.stat(lock.path.parent).st_mode & 0o777 == 0o700
    lock.release()


def test_what_the_lock_file_says_is_shown_only_as_a_job_name(tmp_path: Path) -> None:
    """Any process of the user may write the file (a rank too): escape sequences or another
    text than a job's name are not shown in a status message."""
    fd = os.open(tmp_path / "port-7777.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"\x1b[2J\x1b[31mpwned")
    try:
        assert PortLock("job-b", folder=tmp_path).try_take() == "another job"
    finally:
        os.close(fd)
