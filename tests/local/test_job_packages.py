"""What a job installs stays in the job: a `requirements.txt` installs into each host's own
Python environment, which its script sees and which ends with the host, never into the user's
Python (SageMaker's fresh container leaves nothing behind either)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    assert_no_processes,
    source_tar,
    training_request,
    wait_until_ended,
)

PACKAGE = "ddpjob_probe_pkg"
SCRIPT = f"""
import os, {PACKAGE}
print("probe", {PACKAGE}.VALUE, {PACKAGE}.__file__, os.environ["RANK"], flush=True)
"""


def make_wheel(folder: Path) -> Path:
    """A one-module wheel, built by hand (no build backend, no index)."""
    name = f"{PACKAGE}-1.0-py3-none-any.whl"
    files = {f"{PACKAGE}.py": b"VALUE = 42\n",
             f"{PACKAGE}-1.0.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n".encode(),
             f"{PACKAGE}-1.0.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"  # noqa: E501
        for path, data in files.items()) + f"{PACKAGE}-1.0.dist-info/RECORD,,\n"
    files[f"{PACKAGE}-1.0.dist-info/RECORD"] = record.encode()
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def _installed_here() -> bool:
    done = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"],
                          capture_output=True, text=True, check=True)
    return PACKAGE.replace("_", "-") in done.stdout.lower().replace("_", "-")


def test_requirements_install_into_each_hosts_own_python_and_end_with_it(
        session: LocalSession, tmp_path: Path) -> None:
    assert importlib.util.find_spec(PACKAGE) is None and not _installed_here()
    source = tmp_path / "code"
    source.mkdir()
    (source / "probe.py").write_text(SCRIPT)
    (source / "requirements.txt").write_text(f"--no-index\n{make_wheel(tmp_path)}\n")
    request = training_request(session, "installs",
                               source_tar(tmp_path / "src", source / "probe.py",
                                          source / "requirements.txt"),
                               "probe.py", hosts=2, workers=2)
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, "installs")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    job_dir = session.home / "jobs" / "installs"
    for host in ("algo-1", "algo-2"):
        lines = [line for line in (job_dir / "logs" / f"{host}.log").read_text().splitlines()
                 if "probe 42" in line]
        assert len(lines) == 2, lines  # each rank imported it, from the host's own environment
        assert all(f"/hosts/{host}.python/" in line for line in lines), lines
        assert not (job_dir / "hosts" / f"{host}.python").exists()  # gone with the host
    assert importlib.util.find_spec(PACKAGE) is None and not _installed_here()
    assert_no_processes(session.home)
