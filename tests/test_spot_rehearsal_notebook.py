"""Execute notebooks/spot_rehearsal.ipynb in a real kernel (nbclient) and check what it printed:
a 2-host spot job interrupted twice on a schedule resumes where it left and completes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import executed_code_cells
from tests.local.conftest import assert_no_processes

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "spot_rehearsal.ipynb"

pytestmark = pytest.mark.slow


def test_spot_rehearsal_notebook_resumes_after_two_interruptions_and_plots_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DDPJOB_HOME", str(home))  # the kernel inherits this environment
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the notebook writes train.py
    code, texts = executed_code_cells(NOTEBOOK, 300)
    setup, script, fit, history, plot = texts
    assert f"home: {home}" in setup and f"Writing {tmp_path / 'tmp'}/spot-rehearsal-" in script

    # Each interruption: SIGTERM reached the script, which saved the step it stopped after;
    # the next attempt, on fresh hosts, resumed from exactly that step.
    saved = [int(s) for s in re.findall(r"SIGTERM: saved step=(\d+), leaving", fit)]
    resumed = [int(s) for s in re.findall(r"resumed from step=(\d+)", fit)]
    assert len(saved) == 2 and resumed == saved, fit[-4000:]
    assert "done at step=249" in fit

    assert "status: Completed" in history
    statuses = re.search(r"history: (.*)", history).group(1).split(" -> ")
    assert statuses.count("Interrupted") == 2 and statuses[-1] == "Completed", statuses
    assert "attempts: 3" in history
    reached = [int(s) for s in re.findall(r"attempt \d: training from \S+ s, reached step (\d+)",
                                          history)]
    assert reached == [saved[0], saved[1], 249], history
    assert any("image/png" in out.get("data", {}) for out in code[-1].outputs), plot
    assert len(list((home / "checkpoints").iterdir())) == 1
    assert_no_processes(home)
    # fit() ends with the official SDK's lines for a spot job: the description's times x 2 hosts
    for name in ("Training", "Billable"):
        per_host = int(re.search(rf"{name}TimeInSeconds: (\d+)", history).group(1))
        assert f"{name} seconds: {2 * per_host}\n" in fit, (fit[-500:], history)
    assert re.search(r"Managed Spot Training savings: \d+(\.\d+)?%", fit), fit[-2000:]
