"""distribution 'mpi' through a real `mpirun` (Open MPI): rank variables, collectives, failures.

`.ci/run` installs Open MPI (Debian's openmpi-bin); where mpirun is absent these tests skip and
test_failures.py checks the clear error instead.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun not installed"),
]

SCRIPT = """
import json, os, pathlib
import torch
import ddpjob_runtime.dataparallel.torch.distributed as dist

dist.init_process_group()
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
seen = {name: os.environ[name] for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE")}
seen.update(rank=dist.get_rank(), world=dist.get_world_size(), local=dist.get_local_rank(),
            local_size=dist.get_local_size(), total=total.item(),
            backend=torch.distributed.get_backend())
pathlib.Path(os.environ["SM_MODEL_DIR"], f"rank-{dist.get_rank()}.json").write_text(
    json.dumps(seen))
"""


def test_mpi_ranks_and_collectives(run_hosts) -> None:
    (result,) = run_hosts(SCRIPT, hosts=1, distribution="mpi", processes_per_host=2)
    assert result.exit_code == 0, result.log[-3000:]
    assert "could not find environment variable" not in result.log  # only set names exported

    seen = [json.loads((result.root / "model" / f"rank-{rank}.json").read_text())
            for rank in (0, 1)]
    for rank, values in enumerate(seen):
        assert values == {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                          "LOCAL_WORLD_SIZE": "2", "rank": rank, "world": 2, "local": rank,
                          "local_size": 2, "total": 3.0, "backend": "gloo"}


def test_mpi_failing_rank_passes_its_exit_code(run_hosts) -> None:
    script = """
    import os, sys
    if os.environ["RANK"] == "1":
        sys.exit(7)
    """
    (result,) = run_hosts(script, hosts=1, distribution="mpi", processes_per_host=2)
    assert result.exit_code == 7, result.log[-3000:]
    assert result.failure.startswith("host algo-1, rank 1, exit code 7"), result.failure
