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
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ddpjob_runtime import fsutil

REQUEST = "request.json"
STATE = "state.json"
LOCK = ".lock"


def write_json(path: Path, data: Any) -> None:
    """Replace `path` with `data` as JSON; a reader sees the old file or the new one, never half."""
    fsutil.write_json(path, data, indent=1, mode=0o600)


def read_json(path: Path) -> Any:
    """The JSON in `path` (FileNotFoundError when it is not there)."""
    with open(path) as f:
        return json.load(f)


class JobExists(Exception):
    """A job of that name is already on disk."""


class JobStore:
    """The jobs under `<home>/jobs`."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.jobs = self.home / "jobs"

    def job_dir(self, name: str) -> Path:
        """The folder of job `name` (whether or not it exists)."""
        return self.jobs / name

    def exists(self, name: str) -> bool:
        """Whether job `name` was created (its state is there)."""
        return (self.job_dir(name) / STATE).is_file()

    def names(self) -> list[str]:
        """Names of every created job."""
        if not self.jobs.is_dir():
            return []
        return [p.name for p in self.jobs.iterdir() if (p / STATE).is_file()]

    def create(self, name: str, request: dict[str, Any], state: dict[str, Any]) -> Path:
        """Create the job's folder with its request and first state, all at once.

        The folder is filled aside and renamed into place, so a job either fully exists or
        not at all; raises JobExists when the name is taken (by this process or another).
        """
        self.jobs.mkdir(parents=True, exist_ok=True)
        target = self.job_dir(name)
        if target.exists():
            raise JobExists(name)
        staging = self.jobs / f".new-{name}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            (staging / LOCK).touch()
            write_json(staging / REQUEST, request)
            write_json(staging / STATE, state)
            try:
                os.rename(staging, target)  # fails when another process took the name first
            except OSError:
                raise JobExists(name) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def request(self, name: str) -> dict[str, Any]:
        """The CreateTrainingJob request the job was created with."""
        return read_json(self.job_dir(name) / REQUEST)

    def state(self, name: str) -> dict[str, Any]:
        """The job's current state (a consistent snapshot, without taking the lock)."""
        return read_json(self.job_dir(name) / STATE)

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """Hold job `name`'s lock (between processes) for the duration of the block."""
        with open(self.job_dir(name) / LOCK, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def update(
        self, name: str, change: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """Apply `change` to the state under the lock; returns the state after it.

        `change` edits the state in place and returns whether it changed anything (only then
        is the file rewritten).
        """
        with self.locked(name):
            state = self.state(name)
            if change(state):
                write_json(self.job_dir(name) / STATE, state)
            return state
