"""Execute notebooks/tuning.ipynb in a real kernel (nbclient) and check what it printed: a local
Random tuning job with early stopping, every trial's objective plotted from
`tuner.analytics().dataframe()`, the best trial's checkpoint brought back by
`tuner.best_estimator().download_checkpoint()`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import executed_code_cells
from tests.local.conftest import assert_no_processes

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "tuning.ipynb"

pytestmark = pytest.mark.slow


def test_tuning_notebook_stops_the_worst_trial_early_and_opens_the_best_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DDPJOB_HOME", str(home))  # the kernel inherits this environment
    code, texts = executed_code_cells(NOTEBOOK, 400)
    setup, tune, trials, checkpoint = texts
    assert f"python: {sys.executable}" in setup and f"home: {home}" in setup

    assert "status: Completed" in tune, tune
    best = re.search(r"best: (\S+)", tune).group(1)
    assert "columns: ['lr', 'TrainingJobName', 'TrainingJobStatus', 'FinalObjectiveValue', " \
        "'TrainingStartTime', 'TrainingEndTime', 'TrainingElapsedTimeSeconds']" in trials, trials
    rows = re.findall(r"^(\S+): lr=(\S+) (\w+) after (\d) epoch\(s\), val_loss (\S+), "
                      r"(\S+) s$", trials, re.MULTILINE)
    assert len(rows) == 4, trials
    assert all(float(row[5]) > 0 for row in rows), trials
    # The seed's last draw is the smallest rate: worse than the median of the three before it
    # at its first epoch, it is stopped there; the others train all 6 epochs.
    *full, last = rows
    assert [row[2] for row in full] == ["Completed"] * 3, trials
    assert all(row[3] == "6" for row in full), trials
    assert last[2] == "Stopped" and int(last[3]) < 6, trials
    assert float(last[1]) < min(float(row[1]) for row in full)
    assert best == min(full, key=lambda row: float(row[4]))[0]
    assert any("image/png" in out.get("data", {}) for out in code[2].outputs)  # the plot

    assert f"downloaded step-000000006 of {best}" in checkpoint, checkpoint
    assert f"best trial {best}: epoch 6, val_loss" in checkpoint, checkpoint
    weight, bias = (float(v) for v in re.search(r"y = (\S+) x \+ (\S+)", checkpoint).groups())
    assert abs(weight - 3) < 0.2 and abs(bias - 1) < 0.2, checkpoint
    assert_no_processes(home)
