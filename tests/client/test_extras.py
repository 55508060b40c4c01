"""Optional dependencies: submitting needs no torch; a local job without it is one clear line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ddpjob import PyTorch, extras
from ddpjob.errors import UserInputError


def test_missing_module_names_the_extra() -> None:
    with pytest.raises(UserInputError, match=r"a local training job needs no_such_module_x, "
                                             r"which is not installed: pip install "
                                             r"'ddpjob\[local\]'"):
        extras.require("no_such_module_x", extras.LOCAL_EXTRA, "a local training job")


def test_local_job_without_torch(src: Path, local_session: Any, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    estimator = PyTorch(entry_point="train.py", source_dir=str(src), session=local_session)
    estimator.training_job_request(job_name="no-torch-0")  # the dry run needs no torch
    with pytest.raises(UserInputError, match=r"needs torch, .* pip install 'ddpjob\[local\]'"):
        estimator.fit(job_name="no-torch-1")
    assert not (tmp_path / "home").exists()  # nothing was stored or started


def test_base_dependencies_have_no_torch() -> None:
    import tomllib

    project = tomllib.loads(Path(__file__).parents[2].joinpath("pyproject.toml").read_text())
    base = project["project"]["dependencies"]
    assert not [d for d in base if d.startswith("torch")]
    assert any(d.startswith("torch") for d in project["project"]["optional-dependencies"]["local"])


def test_the_client_imports_no_torch() -> None:
    """What a notebook or the CLI imports to submit a job or a tuning job, or to read its
    trials, leaves torch (and numpy, pandas, optuna and the official SDK) unloaded."""
    code = ("import sys, ddpjob, ddpjob.cli; "
            "from ddpjob import PyTorch, HuggingFace, LocalSession, Session, TrainingInput; "
            "from ddpjob import HyperparameterTuner, IntegerParameter, CategoricalParameter; "
            "from ddpjob import HyperparameterTuningJobAnalytics; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "             ('torch', 'numpy', 'pandas', 'optuna', 'sagemaker')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
