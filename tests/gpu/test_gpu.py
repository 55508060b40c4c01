"""What only a machine with an NVIDIA GPU can check: NCCL jobs on `local_gpu` (ddpjob's DDP
library, and the `smdistributed` stand-in's "smddp"), ddpjob's DDP step on CUDA against torch's
own, a checkpoint of CUDA tensors, and the hosts' GPU shares with the real `nvidia-smi`.

Marked `gpu`: skipped where torch sees no CUDA device (tests/conftest.py). `tests/gpu/run.sh`
runs them, then the GPU benchmarks, in one call (docs/testing.md#gpu).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ddpjob import LocalSession, PyTorch
from ddpjob.local.hostkinds import hostpython
from ddpjob.local.isolation import gpus
from ddpjob_runtime import checkpoints
from ddpjob_runtime.platform import sm_variables

from tests.conftest import GROUP_TEARDOWN
from tests.e2e.conftest import JOB_TIMEOUT_S, log_lines, wait_until_ended
from tests.local.conftest import assert_no_processes, local_session_at

pytestmark = pytest.mark.gpu

JOBS = Path(__file__).parent / "jobs"
BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "bench_ddp_step.py"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[LocalSession]:
    with local_session_at(tmp_path / "home") as local:
        yield local


@pytest.mark.slow
@pytest.mark.parametrize("api", ["ddpjob", "smddp"])
def test_a_local_gpu_job_trains_on_nccl(session: LocalSession, api: str) -> None:
    """2 hosts when the machine has 2 GPUs or more (each its equal share), else 1; one worker
    per GPU of its host."""
    hosts = 2 if torch.cuda.device_count() >= 2 else 1
    est = PyTorch(entry_point="nccl_step.py", source_dir=str(JOBS),
                  dependencies=[str(GROUP_TEARDOWN)], instance_type="local_gpu",
                  instance_count=hosts, hyperparameters={"api": api},
                  distribution={"torch_distributed": {"enabled": True}},
                  max_run=JOB_TIMEOUT_S, session=session)
    est.fit(wait=False, job_name=f"nccl-{api}")
    job = wait_until_ended(session, f"nccl-{api}")
    lines = [line for i in range(hosts) for line in log_lines(session, f"nccl-{api}",
                                                              f"algo-{i + 1}")]
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-30:])
    assert_no_processes(session.home)
    done = [line for line in lines if line.startswith("rank=")]
    world = len(done)
    assert world == hosts * (len(gpus.visible_gpus()) // hosts), lines[-30:]
    backend = "nccl" if api == "ddpjob" else "smddp"
    for line in done:  # the gradient averaged over ranks: 2 * mean(rank + 1)
        assert (f"world={world} backend={backend} device=cuda grad={world + 1:g} "
                f"ranks={world * (world - 1) // 2:g}") in line, line


@pytest.mark.slow
def test_ddp_step_time_on_cuda_against_torchs_own_ddp() -> None:
    """No timed assertion: the ratio is printed (run with -s), the benchmark must run."""
    done = subprocess.run([sys.executable, str(BENCHMARK), "--device", "cuda", "--reps", "4",
                           "--steps", "20", "--batch", "128"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stdout)
    ratio = re.search(r"ratio ours/torch: ([0-9.]+)", done.stdout)
    assert ratio and float(ratio.group(1)) > 0, done.stdout


def test_a_checkpoint_of_cuda_tensors_saves_and_loads(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("DDPJOB_CHECKPOINT_URI", raising=False)
    weight = torch.arange(6.0, device="cuda").reshape(2, 3)
    assert checkpoints.save({"weight": weight, "step": 3}, step=3)
    weight.fill_(-1.0)  # training goes on: the snapshot (copied to the CPU) must not change
    checkpoints.flush()
    expected = torch.arange(6.0).reshape(2, 3)
    on_cpu = checkpoints.load_latest()
    assert on_cpu["weight"].device.type == "cpu" and torch.equal(on_cpu["weight"], expected)
    on_gpu = checkpoints.load_latest(map_location="cuda")
    assert on_gpu["weight"].is_cuda and torch.equal(on_gpu["weight"].cpu(), expected)


def test_hosts_share_the_gpus_the_real_nvidia_smi_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    visible = gpus.visible_gpus()
    assert len(visible) == torch.cuda.device_count()
    assert gpus.host_shares("local_gpu", 1) == [visible]
    assert gpus.host_shares("local", 1) == [[]]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible[0])  # a host given one GPU counts one
    assert sm_variables.num_gpus() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a `local` host counts none
    assert sm_variables.num_gpus() == 0


@pytest.mark.integration  # a host venv
def test_a_container_hosts_nvidia_smi_lists_its_own_gpu_alone(tmp_path: Path) -> None:
    first = gpus.visible_gpus()[0]
    bin_dir = hostpython.create(tmp_path / "host", sys.executable, [first])
    listed = subprocess.run([str(bin_dir / "nvidia-smi"), "--list-gpus"], capture_output=True,
                            text=True, timeout=60, check=True).stdout.splitlines()
    assert len(listed) == 1 and listed[0] in gpus.listing(), listed
    queried = subprocess.run([str(bin_dir / "nvidia-smi"), "--query-gpu=index",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60, check=True).stdout.split()
    assert len(queried) == 1, queried  # the machine's nvidia-smi, on that GPU only (-i)
