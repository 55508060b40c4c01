"""Scripts written for SageMaker's own containers run unchanged as local jobs of ddpjob's
estimator: real 2-host jobs on ddpjob's runtime (gloo), code and outputs in the local bucket."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from ddpjob import LocalSession, PyTorch, packaging

from tests.conftest import GROUP_TEARDOWN
from tests.e2e.conftest import JOB_TIMEOUT_S, log_lines, wait_until_ended
from tests.local.conftest import assert_no_processes

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "sagemaker_scripts"
HOSTS = ("algo-1", "algo-2")
STAND_INS = packaging.runtime_source().parent / packaging.STAND_INS


def _run(session: LocalSession, name: str, script: str, **settings: Any) -> list[str]:
    """A 2-host job of `script`; both hosts' log lines once it Completed."""
    est = PyTorch(entry_point=script, source_dir=str(SCRIPTS),
                  dependencies=[str(GROUP_TEARDOWN)], instance_type="local", instance_count=2,
                  max_run=JOB_TIMEOUT_S, session=session, **settings)
    est.fit(wait=False, job_name=name)
    job = wait_until_ended(session, name)
    lines = [line for host in HOSTS for line in log_lines(session, name, host)]
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), lines[-30:])
    assert_no_processes(session.home)
    return lines


def test_a_script_that_ranks_its_hosts_itself_runs_without_a_distribution(
        session: LocalSession) -> None:
    """pytorch_mnist/mnist.py's shape: init_process_group(rank=SM_HOSTS.index(SM_CURRENT_HOST),
    world_size=len(SM_HOSTS)) needs MASTER_ADDR/MASTER_PORT, which every job gets."""
    lines = _run(session, "mnist-hosts", "mnist_hosts.py")
    for rank in range(2):
        assert f"host_rank={rank} world_size=2 sum=3" in lines, lines[-30:]


SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}, "processes_per_host": 2}


@pytest.mark.parametrize("script", ["smddp_guide.py", "smddp_backend.py"])
def test_a_script_for_sagemakers_data_parallel_library_runs_on_its_stand_in(
        session: LocalSession, script: str) -> None:
    """2 hosts x 2 workers (torchrun): the seed guide's `smdistributed.dataparallel.torch`
    API, and torch's own with `torch_smddp` imported and backend "smddp" (gloo here); the
    stand-in is ddpjob's (localkit), which the user's own Python cannot import."""
    lines = _run(session, script.removesuffix(".py").replace("_", "-"), script,
                 distribution=SMDDP)
    done = [line for line in lines if line.startswith("rank=")]
    assert len(done) == 4, lines[-30:]
    for rank in range(4):
        line = next(line for line in done if line.startswith(f"rank={rank} "))
        assert "world=4" in line and "grad=5" in line and "ranks=6" in line, line
        if script == "smddp_backend.py":
            assert "backend=smddp" in line, line
        else:
            assert f"local_rank={rank % 2}" in line, line
            assert f"from={STAND_INS}" in line, line
    assert importlib.util.find_spec("smdistributed") is None
