"""Fixtures of the tuning tests: a source folder and estimators whose trials a tuner defines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

LOSS = [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A source folder whose script prints the objective metric."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "train.py").write_text("print('loss=0.5')\n")
    return folder


@pytest.fixture
def local_estimator(src: Path, tmp_path: Path) -> Callable[..., Any]:
    """`local_estimator(**changes)`: a PyTorch estimator on a LocalSession in a fresh home."""
    from ddpjob import LocalSession, PyTorch

    def make(**changes: Any) -> Any:
        arguments = {"entry_point": "train.py", "source_dir": str(src),
                     "hyperparameters": {"epochs": 3, "lr": 0.1},
                     "metric_definitions": LOSS,
                     "session": LocalSession(home=tmp_path / "home"), **changes}
        return PyTorch(**arguments)

    return make
