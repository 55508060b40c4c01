"""Each host has a home of its own inside its root, as SageMaker's container has (HOME=/root):
a script writing `~/x` and a requirement whose build writes into `~` leave the user's home as
it was (the user's XDG and pip cache variables included), and a process forked from the job's
template sees the same home as a fresh interpreter does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

from tests.local.conftest import JOBS, log_text, source_tar, training_request, wait_until_ended

pytestmark = pytest.mark.slow

SETUP = """\
import os
from pathlib import Path
from setuptools import setup

Path(os.path.expanduser("~"), "built-by-requirements").write_text("built")
setup(name="ddpjob-home-probe", version="1.0", py_modules=["ddpjob_home_probe"])
"""


def _code(folder: Path) -> list[Path]:
    """The probe script, a requirements.txt and the package it names, built from source."""
    package = folder / "pkg"
    package.mkdir(parents=True)
    (package / "setup.py").write_text(SETUP)
    (package / "ddpjob_home_probe.py").write_text("VALUE = 1\n")
    (folder / "requirements.txt").write_text("--no-index\n./pkg\n")
    return [JOBS / "home_probe.py", folder / "requirements.txt", package]


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
def test_a_hosts_home_is_its_own_and_the_users_stays_untouched(
        session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        forked: bool) -> None:
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_home / ".cache"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(user_home / ".cache" / "pip"))
    # the build uses the host's own setuptools: no index needed
    environment = {"PIP_NO_BUILD_ISOLATION": "0"}
    if forked:
        environment["PYTHONHASHSEED"] = "0"  # the script's process is forked from the template
    else:
        monkeypatch.setenv("DDPJOB_PRELOAD", "0")  # every process a fresh interpreter
    source = source_tar(tmp_path / "src", *_code(tmp_path / "code"))
    request = training_request(session, "home", source, "home_probe.py", workers=1,
                               distributed=False, Environment=environment)
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, "home")
    log = log_text(session, "home", "algo-1")
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), log)
    report = json.loads(re.search(r"home: (.*)", log).group(1))
    host_home = str(session.job_dir("home") / "hosts" / "algo-1" / "home")
    assert report == {"HOME": host_home, "expanded": host_home, "built": True,
                      "x": "written by the job", "forked": forked}
    assert not list(user_home.iterdir())
    assert not Path(host_home).exists()  # gone with the host, as a container's home
