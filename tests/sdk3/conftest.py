"""A second virtual environment that holds the official SageMaker SDK v3 beside ddpjob.

The main test environment runs v2 (`ddpjob[dev]`); tests of the v3 paths (ModelTrainer, v3's
registry, installing ddpjob beside v3) run their code in this one, through `sdk3_python`.
It is built once per checkout under `.venv-sdk3/` (or taken from `$DDPJOB_SDK3_PYTHON`): first
the official SDK v3 with torch, its `pip freeze` and `pip check` recorded, then ddpjob installed
beside it, so that a test can prove that installing ddpjob changed nothing of the SDK's.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
VENV = REPO / ".venv-sdk3"
SDK3 = "sagemaker>=3"
TORCH = "torch==2.13.0"  # the CPU build on this machine's disk, as in .ci/run
#: What the v3 tests use in that venv besides ddpjob and the SDK: a kernel for the notebook.
EXTRAS = ("ipykernel>=6.29", "nbclient>=0.10", "nbformat>=5.10", "matplotlib>=3.7")
BEFORE, AFTER = "freeze-before-ddpjob.txt", "freeze-after-ddpjob.txt"
CHECK_BEFORE, CHECK_AFTER = "check-before-ddpjob.txt", "check-after-ddpjob.txt"
#: The first test to ask for the venv builds it (about 2-4 minutes on 2 cores, some hundred MB
#: from the package registry): its time limit allows for that, beyond the suite's 300 s.
BUILD_TIMEOUT_S = 1500


def _pip(python: Path, *args: str) -> str:
    done = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          timeout=1200, check=False)
    if done.returncode != 0 and args[0] != "check":
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-3000:]}")
    return done.stdout


def _build(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    _pip(python, "install", "--quiet", "--upgrade", "pip")
    _pip(python, "install", "--quiet", SDK3, TORCH, *EXTRAS)
    (venv / BEFORE).write_text(_pip(python, "freeze", "--exclude-editable"))
    (venv / CHECK_BEFORE).write_text(_pip(python, "check"))
    _pip(python, "install", "--quiet", "-e", str(REPO))
    (venv / AFTER).write_text(_pip(python, "freeze", "--exclude-editable"))
    (venv / CHECK_AFTER).write_text(_pip(python, "check"))


def sdk3_venv() -> Path:
    """The v3 venv's folder, built (once, under a lock) when it is not there yet."""
    given = os.environ.get("DDPJOB_SDK3_PYTHON")
    if given:
        return Path(given).parents[1]
    with open(REPO / ".venv-sdk3.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (VENV / CHECK_AFTER).exists():
            _build(VENV)
    return VENV


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the v3 venv get the time to build it (see BUILD_TIMEOUT_S)."""
    for item in items:
        if "sdk3_python" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S))


@pytest.fixture(scope="session")
def sdk3_python() -> Path:
    """The Python of an environment with the official SDK v3, torch and this ddpjob."""
    return sdk3_venv() / "bin" / "python"
