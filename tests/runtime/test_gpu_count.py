"""A host counts its GPUs as SageMaker's toolkit does (`nvidia-smi --list-gpus`), but only those
CUDA_VISIBLE_DEVICES leaves it: a local host's share of the machine (`sm_variables.num_gpus`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ddpjob_runtime.platform.sm_variables import num_gpus

# The machine's nvidia-smi lists every GPU, whatever CUDA_VISIBLE_DEVICES says.
MACHINE_SMI = """#!/bin/sh
[ "$1" = "--list-gpus" ] || exit 2
for i in 0 1 2 3; do echo "GPU $i: NVIDIA H100 (UUID: GPU-000$i)"; done
"""


@pytest.fixture
def four_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nvidia-smi").write_text(MACHINE_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize(("visible", "counted"), [
    (None, 4),  # SageMaker: the instance's GPUs
    ("2,3", 2),  # a local_gpu host's share
    ("", 0),  # a `local` host on a GPU machine: CPU and gloo
    ("0,1,2,3,4,5", 4),  # never more than the machine has
])
def test_a_host_counts_only_the_gpus_it_may_use(four_gpus: None, monkeypatch: pytest.MonkeyPatch,
                                                visible: str | None, counted: int) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert num_gpus() == counted
