"""Fixtures for runtime tests: simulated hosts started by hand through `ddpjob-train`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port

HOST_TIMEOUT_S = 120
MARKER_ENV = "DDPJOB_TEST_MARKER"
TRAIN = str(Path(sys.executable).with_name("ddpjob-train"))


@dataclass
class HostResult:
    """One simulated host after its `ddpjob-train` ended."""

    host: str
    root: Path
    exit_code: int
    stdout: str
    stderr: str

    @property
    def failure(self) -> str | None:
        path = self.root / "output" / "failure"
        return path.read_text() if path.exists() else None

    @property
    def log(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Job:
    """A job written to disk but not started: roots per host, the started processes."""

    dir: Path
    roots: list[Path]
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        """Start one `ddpjob-train` per host, concurrently, each with `SAGEMAKER_BASE_DIR`."""
        for root in self.roots:
            env = {
                **os.environ,
                "SAGEMAKER_BASE_DIR": str(root),
                MARKER_ENV: self.marker,
                "OMP_NUM_THREADS": "1",
                **(extra_env or {}),
            }
            out = (root / "stdout.log").open("w")
            err = (root / "stderr.log").open("w")
            self.procs.append(
                subprocess.Popen([TRAIN], env=env, stdout=out, stderr=err, cwd=self.dir)
            )
            out.close()
            err.close()

    def wait(self, timeout: float = HOST_TIMEOUT_S) -> list[HostResult]:
        """Wait for every host (at most `timeout` s in all); then nothing of the job may remain."""
        deadline = time.monotonic() + timeout
        try:
            codes = [
                proc.wait(timeout=max(0.1, deadline - time.monotonic())) for proc in self.procs
            ]
        finally:
            self.stop()
        leftovers = wait_for_no_processes(self.marker)
        assert not leftovers, f"processes left behind: {leftovers}"
        return [
            HostResult(
                root.name,
                root,
                code,
                (root / "stdout.log").read_text(),
                (root / "stderr.log").read_text(),
            )
            for root, code in zip(self.roots, codes, strict=True)
        ]

    def stop(self) -> None:
        """Kill whatever is left of the job (bootstraps first, then anything with the marker)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        for pid in marked_processes(self.marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment carries `DDPJOB_TEST_MARKER=marker` (found via /proc)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def wait_for_no_processes(marker: str, timeout: float = 15.0) -> list[int]:
    """Marked processes still alive after `timeout` s (orphans take a moment to be reaped)."""
    deadline = time.monotonic() + timeout
    while (pids := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


def make_sourcedir(source: str | Path | dict[str, str], archive: Path) -> Path:
    """A `sourcedir.tar.gz` from a script text (as train.py), a folder, or {name: text}."""
    if isinstance(source, Path):
        files = {
            str(p.relative_to(source)): p.read_text() for p in source.rglob("*") if p.is_file()
        }
    elif isinstance(source, str):
        files = {"train.py": source}
    else:
        files = source
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in files.items():
            data = textwrap.dedent(text).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return archive


def write_job(
    job_dir: Path,
    source: str | Path | dict[str, str] | None,
    hyperparameters: dict[str, Any] | None = None,
    hosts: int = 2,
    processes_per_host: int = 2,
    entry_point: str = "train.py",
    distribution: str | None = "torch_distributed",
    channels: dict[str, str] | None = None,
    platform: dict[str, Any] | None = None,
) -> Job:
    """Write one `/opt/ml`-shaped root per host under `job_dir/hosts/algo-N` (see `run_hosts`)."""
    names = [f"algo-{i + 1}" for i in range(hosts)]
    archive = make_sourcedir(source, job_dir / "sourcedir.tar.gz") if source is not None else None
    hps: dict[str, Any] = {
        "sagemaker_program": entry_point,
        "sagemaker_job_name": "test-job",
        "sagemaker_region": "us-east-1",
        "ddpjob_processes_per_host": processes_per_host,
    }
    if archive is not None:
        hps["sagemaker_submit_directory"] = archive.as_uri()
    if distribution == "torch_distributed":
        hps["sagemaker_torch_distributed_enabled"] = True
    elif distribution == "mpi":
        hps["sagemaker_mpi_enabled"] = True
    hps.update(hyperparameters or {})
    port = free_port()
    roots = []
    for name in names:
        root = job_dir / "hosts" / name
        config = root / "input" / "config"
        config.mkdir(parents=True)
        files = {
            # Every value JSON-encoded, as the official SageMaker SDK sends them.
            "hyperparameters.json": {k: json.dumps(v) for k, v in hps.items()},
            "resourceconfig.json": {
                "current_host": name,
                "hosts": names,
                "network_interface_name": "eth0",
                "current_instance_type": "local",
                "current_group_name": "homogeneousCluster",
                "instance_groups": [
                    {
                        "instance_group_name": "homogeneousCluster",
                        "instance_type": "local",
                        "hosts": names,
                    }
                ],
            },
            "inputdataconfig.json": {
                c: {
                    "TrainingInputMode": "File",
                    "S3DistributionType": "FullyReplicated",
                    "RecordWrapperType": "None",
                }
                for c in (channels or {})
            },
            "platform.json": {
                "job_name": "test-job",
                "host_addresses": dict.fromkeys(names, "127.0.0.1"),
                "master_port": port,
                "channels": channels or {},
                "status_file": str(job_dir / f"{name}.status"),
                **(platform or {}),
            },
        }
        for file, content in files.items():
            (config / file).write_text(json.dumps(content))
        roots.append(root)
    return Job(job_dir, roots)


@pytest.fixture
def run_hosts(tmp_path: Path) -> Iterator[Callable[..., list[HostResult]]]:
    """Run a job on simulated hosts through `ddpjob-train`; returns one `HostResult` per host.

    ``run_hosts(source, hyperparameters=None, hosts=2, processes_per_host=2,
    entry_point="train.py", distribution="torch_distributed", channels=None, platform=None,
    timeout=120, env=None)``

    - `source`: the training script's text (becomes `train.py`), a folder, or `{path: text}`;
      packed into `sourcedir.tar.gz` and passed by `file://` as `sagemaker_submit_directory`.
    - `hyperparameters`: user values (and overrides of the `sagemaker_*` ones), JSON-encoded
      into hyperparameters.json like the official SDK does.
    - Each host `algo-N` gets its own root `tmp_path/job/hosts/algo-N` with resourceconfig,
      inputdataconfig (one entry per `channels` key), and platform.json: every host at
      127.0.0.1, a free `master_port`, `channels` ({name: uri}, staged by the runtime),
      `status_file` at `tmp_path/job/algo-N.status`, plus any `platform` keys (e.g.
      `output_path`, `checkpoint_s3_uri`).
    - `distribution`: "torch_distributed" (torchrun, `processes_per_host` workers per host),
      "mpi", or None (the entry point once per host).
    - The hosts start concurrently; `timeout` bounds the wait. Afterwards no process of the
      job may remain (checked through a marker variable in /proc/*/environ; leftovers are
      killed and fail the test). `HostResult` has `host`, `root`, `exit_code`, `stdout`,
      `stderr`, `log` and `failure` (the text of `output/failure`, or None).
    """
    jobs: list[Job] = []

    def run(
        source: Any,
        *,
        timeout: float = HOST_TIMEOUT_S,
        env: dict[str, str] | None = None,
        **options: Any,
    ) -> list[HostResult]:
        job_dir = tmp_path / "job"
        if job_dir.exists():
            shutil.rmtree(job_dir)
        job_dir.mkdir()
        job = write_job(job_dir, source, **options)
        jobs.append(job)
        job.start(env)
        return job.wait(timeout)

    yield run
    for job in jobs:
        job.stop()
