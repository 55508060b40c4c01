"""A container host's Python: what a training image has on PATH, in a venv of the host's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddpjob.local.hostkinds import hostpython

pytestmark = pytest.mark.integration  # builds host venvs and runs their pip and torchrun

# A machine's nvidia-smi with two GPUs (the tool is the machine's, not ours: a stand-in).
MACHINE_SMI = """#!/bin/sh
if [ "$1" = "--list-gpus" ]; then
  echo "GPU 0: NVIDIA H100 (UUID: GPU-aaaa)"
  echo "GPU 1: NVIDIA H100 (UUID: GPU-bbbb)"
else
  echo "machine nvidia-smi $*"
fi
"""
# What ModelTrainer's environment.py does to count a host's GPUs.
COUNT = ("import subprocess\ntry:\n    out = subprocess.check_output(['nvidia-smi', "
         "'--list-gpus']).decode()\n    print(sum(1 for l in out.splitlines() if "
         "l.startswith('GPU ')))\nexcept (OSError, subprocess.CalledProcessError):\n"
         "    print(0)\n")


@pytest.fixture
def machine_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "machine-bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(MACHINE_SMI)
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def _run(bin_dir: Path, *command: str) -> str:
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(list(command), env=env, capture_output=True, text=True, check=True,
                          timeout=120).stdout


@pytest.mark.parametrize(("gpus", "count"), [([], "0"), (["1"], "1"), (["GPU-aaaa"], "1"),
                                             (["0", "1"], "2")])
def test_the_drivers_count_the_hosts_own_gpus(
    tmp_path: Path, machine_smi: Path, gpus: list[str], count: str
) -> None:
    bin_dir = hostpython.create(tmp_path / "algo-1.python", sys.executable, gpus)
    assert _run(bin_dir, "python3", "-c", COUNT).strip() == count
    if gpus:  # other queries go to the machine's tool, for the host's GPUs only
        assert _run(bin_dir, "nvidia-smi", "-q").strip() == \
            f"machine nvidia-smi -i {','.join(gpus)} -q"


def test_python_pip_and_torchrun_are_the_hosts_own(tmp_path: Path) -> None:
    folder = tmp_path / "algo-1.python"
    bin_dir = hostpython.create(folder, sys.executable, [])
    for name in ("python", "python3", "pip", "pip3", "torchrun"):
        assert (bin_dir / name).exists(), name
    prefix = _run(bin_dir, "python", "-c", "import sys, torch; print(sys.prefix)")
    assert Path(prefix.strip()) == folder  # this Python's packages (torch) are seen
    where = _run(bin_dir, "pip", "--version")  # pip of this Python, installing into the venv
    assert "pip " in where
    scheme = _run(bin_dir, "python", "-c", "import sysconfig; print(sysconfig.get_paths()"
                                           "['purelib'])")
    assert Path(scheme.strip()).is_relative_to(folder)
    assert "usage: torchrun" in _run(bin_dir, "torchrun", "--help")
