"""The DDP library in a real job: 2 simulated hosts x 2 gloo workers through `ddpjob-train`.

All checks run inside one launch of ``dataparallel_job.py`` (each launch costs seconds): the
script raises on any wrong value, and each rank reports its weights' hash back here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("dataparallel_job.py")
HOSTS, WORKERS = 2, 2


@pytest.mark.slow
def test_collectives_and_cnn_training_on_two_hosts(
    run_hosts: Callable[..., list], tmp_path: Path
) -> None:
    out = tmp_path / "ranks"
    results = run_hosts(
        {"train.py": JOB.read_text()},
        hyperparameters={"out": str(out), "steps": 6},
        hosts=HOSTS,
        processes_per_host=WORKERS,
    )
    for host in results:
        assert host.exit_code == 0, f"{host.host}: {host.failure}\n{host.log[-4000:]}"

    world = HOSTS * WORKERS
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(world)]
    assert [r["rank"] for r in ranks] == list(range(world))
    assert {r["world_size"] for r in ranks} == {world}
    assert [r["local_rank"] for r in ranks] == [0, 1] * HOSTS
    # Ranks 0-1 run on the first host, 2-3 on the second.
    hosts = [f"algo-{1 + r // WORKERS}" for r in range(world)]
    assert [r["env"]["SM_CURRENT_HOST"] for r in ranks] == hosts
    assert len({r["weights_sha256"] for r in ranks}) == 1, "replicas hold different weights"
