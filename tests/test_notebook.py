"""Execute notebooks/quickstart.ipynb in a real kernel (nbclient) and check what it printed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import executed_code_cells
from tests.local.conftest import assert_no_processes

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "quickstart.ipynb"

pytestmark = pytest.mark.slow


def test_quickstart_notebook_trains_and_opens_the_model_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run twice in one home, as a user re-running the notebook: each run trains from scratch
    (a fixed checkpoint folder made the second job resume after the last epoch, train nothing
    and plot an empty curve)."""
    home = tmp_path / "home"
    monkeypatch.setenv("DDPJOB_HOME", str(home))  # the kernel inherits this environment
    for run in (1, 2):
        code, outputs = executed_code_cells(NOTEBOOK, 300)
        setup, fit, curve, model, checkpoints = outputs
        assert f"python: {sys.executable}" in setup  # the kernel runs this environment's Python
        assert f"home: {home}" in setup
        assert "[algo-1 rank 0] epoch 1/2" in fit, f"run {run}"
        assert "[algo-1 rank 0] epoch 2/2" in fit, f"run {run}"
        assert "[algo-2]" in fit and "Completed" in fit
        values = [float(v) for v in re.findall(r"from (\S+) to (\S+)", curve)[0]]
        assert re.search(r"^(\d+) loss values", curve).group(1) != "0" and values[1] < values[0]
        plot = next(cell for cell in code if "training_job_analytics" in cell.source)
        assert any("image/png" in out.get("data", {}) for out in plot.outputs)  # the plot itself
        assert "status: Completed" in model
        assert "history: Starting -> " in model and model.count("Completed") >= 2
        assert "model.tar.gz holds: ['model.pt']" in model
        assert f"model_data: {(home / 'output').as_uri()}/mnist-notebook-" in model
        assert checkpoints.count("Checkpoint(step=") == 2, f"run {run}: {checkpoints}"
        assert "latest checkpoint: step-000000002, epoch 2, loss" in checkpoints
    assert len(list((home / "checkpoints").iterdir())) == 2  # one folder per run
    assert_no_processes(home)
