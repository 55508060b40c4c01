"""Fixtures for local-backend tests: a LocalSession in a temporary home, requests, waits."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ddpjob.local.session import LocalSession

from tests.conftest import GROUP_TEARDOWN

JOBS = Path(__file__).parent / "jobs"
EXAMPLE = Path(__file__).parents[2] / "examples" / "mnist_cnn"
JOB_TIMEOUT_S = 240


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def processes_under(path: Path) -> list[int]:
    """Pids (not ours) whose command line or environment mentions `path`."""
    needle = str(path).encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":
                continue  # exited, waiting to be reaped
            blob = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            blob += Path(f"/proc/{entry.name}/environ").read_bytes()
            if needle in blob:
                found.append(int(entry.name))
    return found


def assert_no_processes(path: Path, timeout_s: float = 30) -> None:
    """Every process of the jobs under `path` is gone (they may take a moment to exit)."""
    wait_for(lambda: not processes_under(path), timeout_s, f"the processes under {path} to end")


@contextlib.contextmanager
def local_session_at(home: Path) -> Iterator[LocalSession]:
    """A LocalSession in `home`; on exit kills (and fails on) what its jobs left running."""
    yield LocalSession(home)
    # A supervisor exits just after it wrote the final status a test waited for: give what is
    # ending a moment (a process still there after it is left behind).
    deadline = time.monotonic() + 10
    while (leftovers := processes_under(home)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in leftovers:  # only processes of this test's jobs, named by their home
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"processes left behind by the test: {leftovers}"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[LocalSession]:
    """A LocalSession whose home is a fresh temporary folder; kills what a failed test left."""
    with local_session_at(tmp_path / "home") as local:
        yield local


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config file naming the session's home, in DDPJOB_CONFIG (for `ddpjob` in-process)."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"home": str(tmp_path / "home")}))
    monkeypatch.setenv("DDPJOB_CONFIG", str(path))
    monkeypatch.delenv("DDPJOB_HOME", raising=False)
    return path


def source_tar(folder: Path, *scripts: Path) -> str:
    """`sourcedir.tar.gz` holding `scripts` and the helper that ends their process group
    (`group_teardown.py`); returns its file:// URI."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for script in (*scripts, GROUP_TEARDOWN):
            tar.add(script, arcname=script.name)
    return archive.as_uri()


def training_request(
    session: LocalSession, name: str, source: str, program: str, *, hosts: int = 1,
    workers: int = 2, hyperparameters: dict[str, str] | None = None, distributed: bool = True,
    hash_seed: str | None = None, **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """A CreateTrainingJob request shaped like the official SDK's for a PyTorch DDP job.

    A test whose subject is not torch asks for a plain script (`distributed=False, workers=1`:
    one process per host, no torchrun); one that needs torchrun but not a hash seed per rank
    passes `hash_seed` (the job's `PYTHONHASHSEED`): its workers are then forked from the job's
    template instead of each starting an interpreter that imports torch (docs/testing.md).
    """
    if hash_seed is not None:
        extra["Environment"] = {**extra.get("Environment", {}), "PYTHONHASHSEED": hash_seed}
    hps = {
        "sagemaker_program": f'"{program}"',
        "sagemaker_submit_directory": f'"{source}"',
        "sagemaker_container_log_level": "20",
        "sagemaker_job_name": f'"{name}"',
        **({"sagemaker_torch_distributed_enabled": "true"} if distributed else {}),
        "ddpjob_processes_per_host": str(workers),
        **(hyperparameters or {}),
    }
    return {
        "TrainingJobName": name,
        "RoleArn": session.resolve_role(None),
        "AlgorithmSpecification": {"TrainingImage": "ddpjob:local", "TrainingInputMode": "File"},
        "HyperParameters": hps,
        "OutputDataConfig": {"S3OutputPath": session.default_output_path()},
        "ResourceConfig": {"InstanceType": "local", "InstanceCount": hosts, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        **extra,
    }


def wait_until_ended(session: LocalSession, name: str, timeout_s: float = JOB_TIMEOUT_S) -> dict:
    """The DescribeTrainingJob response once the job is Completed, Failed or Stopped."""
    def ended() -> dict | None:
        job = session.describe(name).raw
        return job if job["TrainingJobStatus"] in ("Completed", "Failed", "Stopped") else None

    return wait_for(ended, timeout_s, f"job {name} to end")


def run_request(client: Any, request: dict[str, Any], timeout_s: float = JOB_TIMEOUT_S) -> dict:
    """Send `request` to the boto3-shaped `client`; its DescribeTrainingJob once it ended."""
    client.create_training_job(**request)
    name = request["TrainingJobName"]

    def ended() -> dict | None:
        job = client.describe_training_job(TrainingJobName=name)
        return job if job["TrainingJobStatus"] in ("Completed", "Failed", "Stopped") else None

    return wait_for(ended, timeout_s, f"job {name} to end")


def log_text(session: LocalSession, name: str, host: str) -> str:
    """Everything host `host` of the job logged."""
    return (session.job_dir(name) / "logs" / f"{host}.log").read_text()


def machine_state() -> tuple:
    """What local jobs must leave as it is outside their folders: the machine's `/opt` (its
    entries and their times), whether `/opt/ml` exists, and the mount table."""
    opt = Path("/opt")
    entries = sorted((p.name, p.lstat().st_mtime_ns) for p in opt.iterdir()) \
        if opt.is_dir() else None
    return (entries, opt.stat().st_mtime_ns if opt.exists() else None,
            os.path.lexists("/opt/ml"), Path("/proc/self/mountinfo").read_text())


def hash_in_an_interpreter(seed: str, text: str = "some string") -> str:
    """`hash(text)` in a fresh interpreter started with PYTHONHASHSEED=seed."""
    return subprocess.run([sys.executable, "-c", f"print(hash({text!r}))"], check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                          text=True).stdout.strip()
