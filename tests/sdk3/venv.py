"""The second virtual environment of the v3 tests: the official SageMaker SDK v3 beside ddpjob.

`python tests/sdk3/venv.py` builds it under `.venv-sdk3/` (`.ci/run` does, before the tests);
a v3 test that finds none builds it then. What it holds is pinned in one place,
`requirements.txt` beside this file (every package's version in `constraints.txt`); a venv
built from other pins is built again. First the SDK and the rest are installed, their
`pip freeze` and `pip check` recorded, then ddpjob beside them, then its `tune` extra (Optuna),
each recorded again, so that a test can prove that installing ddpjob, with or without the
extra, changed nothing of the SDK's.
`$DDPJOB_SDK3_PYTHON` names an environment to use instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]
VENV = REPO / ".venv-sdk3"
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
BEFORE, AFTER = "freeze-before-ddpjob.txt", "freeze-after-ddpjob.txt"
CHECK_BEFORE, CHECK_AFTER = "check-before-ddpjob.txt", "check-after-ddpjob.txt"
TUNE_AFTER, TUNE_CHECK_AFTER = "freeze-after-ddpjob-tune.txt", "check-after-ddpjob-tune.txt"
PINS = "requirements.sha256"  # in the venv: the pins it was built from, written last


def _pip(python: Path, *args: str) -> str:
    done = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          timeout=1200, check=False)
    if done.returncode != 0 and args[0] != "check":
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-3000:]}")
    return done.stdout


def _pins() -> str:
    """The recipe's hash: the pins and this file (a venv built otherwise is built again)."""
    files = (REQUIREMENTS, REQUIREMENTS.with_name("constraints.txt"), Path(__file__))
    return hashlib.sha256(b"".join(file.read_bytes() for file in files)).hexdigest()


def _build(venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    _pip(python, "install", "--quiet", "--upgrade", "pip")
    _pip(python, "install", "--quiet", "-r", str(REQUIREMENTS))
    (venv / BEFORE).write_text(_pip(python, "freeze", "--exclude-editable"))
    (venv / CHECK_BEFORE).write_text(_pip(python, "check"))
    _pip(python, "install", "--quiet", "-e", str(REPO))
    (venv / AFTER).write_text(_pip(python, "freeze", "--exclude-editable"))
    (venv / CHECK_AFTER).write_text(_pip(python, "check"))
    _pip(python, "install", "--quiet", "-e", f"{REPO}[tune]")
    (venv / TUNE_AFTER).write_text(_pip(python, "freeze", "--exclude-editable"))
    (venv / TUNE_CHECK_AFTER).write_text(_pip(python, "check"))
    (venv / PINS).write_text(_pins())


def sdk3_venv() -> Path:
    """The v3 venv's folder, built (once, under a lock) when it is missing or was built from
    other pins."""
    given = os.environ.get("DDPJOB_SDK3_PYTHON")
    if given:
        return Path(given).parents[1]
    with open(REPO / ".venv-sdk3.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = VENV / PINS
        if not built.exists() or built.read_text() != _pins():
            _build(VENV)
    return VENV


if __name__ == "__main__":
    print(f"the SDK v3 environment: {sdk3_venv()}")
