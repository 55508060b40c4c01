"""Fixtures of the tuning tests: a source folder and estimators whose trials a tuner defines."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ddpjob_runtime.shared.checkpoint_layout import STATE, Manifest, step_dir_name, write_manifest

LOSS = [{"Name": "loss", "Regex": r"loss=([0-9.]+)"}]
#: The origin of the times the checkpoint tests give.
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def save_checkpoint(root: Path, step: int, at: float, data: bytes) -> Path:
    """A complete checkpoint of `step` under the folder `root` (ddpjob's layout), its manifest
    written `at` seconds after T0; returns its folder."""
    folder = root / step_dir_name(step)
    folder.mkdir(parents=True)
    (folder / STATE).write_bytes(data)
    write_manifest(folder, Manifest(step, T0.timestamp() + at, {STATE: {
        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}))
    return folder


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
