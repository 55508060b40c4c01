"""Execute notebooks/modeltrainer.ipynb in a real kernel of the SDK v3 venv (nbclient there) and
check what it printed: a ModelTrainer job on this machine, its model, its checkpoint, the plot."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from tests.conftest import FIXED_PORT, HOST_NAMESPACES, cell_text
from tests.local.conftest import assert_no_processes

pytestmark = [
    pytest.mark.slow,
    FIXED_PORT,
    HOST_NAMESPACES,
]

REPO = Path(__file__).parents[2]
NOTEBOOK = REPO / "notebooks" / "modeltrainer.ipynb"
RUN = """\
import sys
import nbformat
from nbclient import NotebookClient
notebook = nbformat.read(sys.argv[1], as_version=4)
try:
    NotebookClient(notebook, kernel_name="python3", timeout=400,
                   resources={"metadata": {"path": sys.argv[2]}}).execute()
finally:  # a failed run's outputs (the job's logs) show why
    nbformat.write(notebook, sys.argv[3])
"""


def test_modeltrainer_notebook_trains_here_and_plots_the_checkpointed_loss(
    sdk3_python: Path, tmp_path: Path
) -> None:
    home, executed = tmp_path / "home", tmp_path / "executed.ipynb"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "DDPJOB_HOME": str(home), "AWS_CONFIG_FILE": "/dev/null",
           "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",  # no AWS account on this machine
           "PYTHONPATH": os.pathsep.join([str(REPO / "sdk"), str(REPO / "runtime")])}
    done = subprocess.run([str(sdk3_python), "-c", RUN, str(NOTEBOOK), str(NOTEBOOK.parent),
                           str(executed)], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    outputs = "\n".join(cell_text(c) for c in nbformat.read(executed, as_version=4).cells) \
        if executed.exists() else ""
    assert done.returncode == 0, outputs[-6000:] + done.stderr[-2000:]

    notebook = nbformat.read(executed, as_version=4)
    setup, fit, model, curve = (cell_text(c) for c in notebook.cells if c.cell_type == "code")
    assert f"python: {sdk3_python.parent}" in setup
    assert "session: sagemaker.core.helper.session_helper.Session us-east-1" in setup
    assert "data: s3://sagemaker-local/modeltrainer-notebook/data" in setup
    for host in ("algo-1", "algo-2"):  # each host's lines under its stream's name
        assert re.search(rf"modeltrainer-notebook-\S+/{host}-\d+:\nrank \d/4 epoch 19 loss=", fit)
    assert "status: Completed" in model and "model.tar.gz holds: ['model.pt']" in model
    weight, bias = (float(v) for v in re.search(r"y = (\S+) x \+ (\S+)", model).groups())
    assert abs(weight - 3) < 0.5 and abs(bias - 1) < 0.5, model
    first, last = (float(v) for v in re.search(r"from (\S+) to (\S+)", curve).groups())
    assert "checkpoint after epoch 19: 20 losses" in curve and last < first / 10, curve
    plot = notebook.cells[-1]
    assert any("image/png" in out.get("data", {}) for out in plot.outputs)
    assert_no_processes(home)
