"""ddpjob with its `tune` extra beside the official SDK v2 (this venv: the `dev` extra holds
both): pip finds no broken requirement. The v3 side is tests/sdk3/test_install.py."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata


def test_ddpjob_with_optuna_beside_the_sdk_v2_breaks_no_requirement() -> None:
    assert metadata.version("sagemaker").startswith("2.") and metadata.version("optuna")
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
