"""Local jobs on disk: `<home>/jobs/<name>/` with the request, the state and the hosts' files.

Every file is replaced atomically (write aside, then rename), and every read-modify-write of a
job's state holds the job's lock file, so the client, the supervisor and other processes
(a second notebook, `ddpjob` on the command line) can share a job safely.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import fsutil

from ddpjob.errors import UserInputError
from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.base.jobstate import JobState

REQUEST = "request.json"
JOB = "job.json"  # the request as admitted (`admitted.AdmittedJob`)
STATE = "state.json"
LOCK = ".lock"


def write_json(path: Path, data: object) -> None:
    """Replace `path` with `data` as JSON; a reader sees the old file or the new one, never half."""
    fsutil.write_json(path, data, indent=1, mode=0o600)


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


class JobExists(Exception):
    """A job of that name is already on disk (or reserved by another submission)."""


def private_dir(path: Path, what: str = "home") -> Path:
    """`path`, created readable by this user only (0700) when missing, else checked with
    `check_own_dir`: ddpjob never changes the mode of a folder it did not create."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        check_own_dir(path, what)
    return path


def checked_private_dir(path: Path, what: str) -> Path:
    """`path` checked as the home is (`check_path_to`, then `private_dir`): for state this
    user keeps in a folder of its own outside the home, e.g. under `$HOME/.cache`, which
    another user could own or redirect where HOME is a shared folder (HOME=/tmp)."""
    check_path_to(path, what)
    return private_dir(path, what)


def check_dir(path: Path, what: str = "home") -> None:
    """What `checked_private_dir` checks, without writing anything: a folder is refused before
    the first thing is written into it."""
    check_path_to(path, what)
    if path.exists():
        check_own_dir(path, what)


def check_own_dir(path: Path, what: str = "home") -> None:
    """UserInputError unless the existing `path` is a folder of this user that not every user
    may write into (e.g. `/tmp`, mode 1777, where others could plant jobs or cache entries);
    `what` names the folder in the message."""
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        raise UserInputError(f"{what} {path}: not a folder")
    if st.st_uid != os.geteuid():
        raise UserInputError(f"{what} {path}: the folder belongs to another user (uid "
                             f"{st.st_uid}); name a folder of your own")
    if st.st_mode & stat.S_IWOTH:
        raise UserInputError(f"{what} {path}: a folder every user may write into (mode "
                             f"{stat.S_IMODE(st.st_mode):o}) cannot hold private job state; "
                             f"name a new folder, e.g. {path / 'ddpjob'}, which ddpjob creates "
                             f"readable by you only")


def check_path_to(home: Path, what: str = "home") -> None:
    """UserInputError when another user could redirect or replace `home` on its way there: a
    link they own, or a folder they own or that every user may write into without the sticky
    bit (which keeps others from renaming what is not theirs, as in `/tmp`). Links are followed
    as the kernel follows them; the first missing part ends the walk (ddpjob creates the rest,
    private). `what` names `home` in the message."""
    me, hops = os.geteuid(), 0
    parts, current = list(Path(home).absolute().parts[1:]), Path("/")
    while parts:
        part = parts.pop(0)
        step = current.parent if part == ".." else current / part
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            return
        link = stat.S_ISLNK(st.st_mode)
        if st.st_uid not in (0, me) and (parts or link):  # the home itself: check_own_dir
            kind = "link" if link else "folder"
            raise UserInputError(f"{what} {home}: reached through the {kind} {step}, which "
                                 f"another user owns (uid {st.st_uid}); name a folder of your own")
        if link:
            hops += 1
            if hops > 40:
                raise UserInputError(f"{what} {home}: too many links on the way")
            target = Path(os.readlink(step))
            parts = [*target.parts[1 if target.is_absolute() else 0:], *parts]
            current = Path("/") if target.is_absolute() else current
            continue
        if parts and st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            raise UserInputError(f"{what} {home}: below {step}, a folder every user may write "
                                 f"into (mode {stat.S_IMODE(st.st_mode):o}, no sticky bit), where "
                                 f"another user could replace it; name a folder elsewhere")
        current = step


class JobStore:
    """The jobs under `<home>/jobs` (a subclass: another folder and state type, e.g. tuning
    jobs); the home and everything in it are private (0700/0600)."""

    FOLDER = "jobs"

    def __init__(self, home: Path):
        self.home = Path(home)
        self.jobs = self.home / self.FOLDER

    def job_dir(self, name: str) -> Path:
        return self.jobs / name

    def exists(self, name: str) -> bool:
        """Whether job `name` was created (its state is there)."""
        return (self.job_dir(name) / STATE).is_file()

    def names(self) -> list[str]:
        if not self.jobs.is_dir():
            return []
        return [p.name for p in self.jobs.iterdir() if (p / STATE).is_file()]

    def reserve(self, name: str) -> Path:
        """Take the name: create the job's empty folder, atomically (JobExists when taken).

        Nothing else may be written for a job before this succeeds; `create` fills the folder.
        """
        check_path_to(self.home)
        private_dir(self.home)
        private_dir(self.jobs)
        target = self.job_dir(name)
        try:
            target.mkdir(mode=0o700)  # fails when any process took the name first
        except FileExistsError:
            raise JobExists(name) from None
        os.close(os.open(target / LOCK, os.O_CREAT | os.O_WRONLY, 0o600))
        return target

    def release(self, name: str) -> None:
        """Give back a reserved name whose job was never created."""
        if not self.exists(name):
            shutil.rmtree(self.job_dir(name), ignore_errors=True)

    def create(self, request: dict[str, Any], job: AdmittedJob, state: JobState,
               reserved: bool = False) -> Path:
        """Write the job's request and the job as admitted, then its first state (which makes
        it exist); reserves the name first unless the caller did (JobExists when it is taken)."""
        target = self.job_dir(job.name) if reserved else self.reserve(job.name)
        write_json(target / REQUEST, request)
        write_json(target / JOB, job.to_json())
        write_json(target / STATE, state.to_json())
        return target

    def request(self, name: str) -> dict[str, Any]:
        return read_json(self.job_dir(name) / REQUEST)

    def job(self, name: str) -> AdmittedJob:
        """The job as its control plane admitted it."""
        return AdmittedJob.from_json(read_json(self.job_dir(name) / JOB))

    def state(self, name: str) -> JobState:
        """The job's current state (a consistent snapshot, without taking the lock)."""
        return JobState.from_json(read_json(self.job_dir(name) / STATE))

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        with open(self.job_dir(name) / LOCK, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def update(self, name: str, change: Callable[[JobState], bool]) -> JobState:
        """Apply `change` (a JobState method, or a function of the state) under the lock;
        the file is rewritten only when it returns True. Returns the state after it."""
        with self.locked(name):
            state = self.state(name)
            if change(state):
                write_json(self.job_dir(name) / STATE, state.to_json())
            return state
