"""A warm pool's status (`pools.PoolStatus`): every move the table allows or refuses, through the
one function that changes it, and the records that go through it; no job runs."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddpjob.job_status import InvalidTransition
from ddpjob.local.warmpools import poolkeeper, pools
from ddpjob.local.warmpools.pools import ALLOWED_POOL_MOVES, Pool, PoolStatus

S = PoolStatus
ALLOWED = {(S.IN_USE, S.AVAILABLE), (S.IN_USE, S.TERMINATED), (S.AVAILABLE, S.IN_USE),
           (S.AVAILABLE, S.TERMINATED)}


def _pool(status: PoolStatus, supervisor_pid: int | None = 4242) -> Pool:
    return Pool(id="pool-0", key="k", status=status, keep_alive=60, instance_type="local",
                instance_count=1, jobs=[{"job": "j1", "start": 1.0}],
                supervisor_pid=supervisor_pid if status is S.IN_USE else None,
                preloaded=False)  # no template: an image program's pool


def test_the_table_is_every_move_a_pool_makes() -> None:
    assert set(ALLOWED_POOL_MOVES) == set(PoolStatus)
    assert {(a, b) for a, moves in ALLOWED_POOL_MOVES.items() for b in moves} == ALLOWED


@pytest.mark.parametrize(("current", "new"), sorted(ALLOWED))
def test_an_allowed_move(current: PoolStatus, new: PoolStatus) -> None:
    pool = _pool(current)
    pools.move(pool, new, reason="why", supervisor_pid=7 if new is S.IN_USE else None)
    assert pool.status is new
    assert pool.supervisor_pid == (7 if new is S.IN_USE else None)  # only a holder has one
    if new is S.TERMINATED:
        assert pool.reason == "why" and pool.terminated_at is not None
    else:
        assert pool.reason == "" and pool.terminated_at is None


@pytest.mark.parametrize(
    ("current", "new"),
    sorted(set(itertools.product(PoolStatus, PoolStatus)) - ALLOWED))
def test_a_refused_move_changes_nothing(current: PoolStatus, new: PoolStatus) -> None:
    pool = _pool(current)
    before = dict(pool.__dict__)
    with pytest.raises(InvalidTransition, match=f"from {current.value} to {new.value}"):
        pools.move(pool, new, reason="why")
    assert pool.__dict__ == before


def test_records_keep_todays_strings(tmp_path: Path) -> None:
    """A record written before the enum reads back; one written now reads as before."""
    record = {"id": "pool-0", "key": "k", "status": "Available", "keep_alive": 60,
              "instance_type": "local", "instance_count": 1, "jobs": [{"job": "j1", "start": 1}]}
    (tmp_path / pools.RECORD).write_text(json.dumps(record))
    pool = pools.read(tmp_path)
    assert pool.status is S.AVAILABLE
    pools.move(pool, S.IN_USE, supervisor_pid=7)
    pools.write(tmp_path, pool)
    assert json.loads((tmp_path / pools.RECORD).read_text())["status"] == "InUse"
    assert pools.summary(pools.read(tmp_path))["Status"] == "InUse"
    assert type(pools.summary(pool)["Status"]) is str  # what `ddpjob pools list` prints


def _home_with(tmp_path: Path, status: PoolStatus, keeper_pid: int | None) -> Path:
    home = tmp_path / "home"
    pool = _pool(status)
    pool.keeper_pid = keeper_pid
    folder = pools.pools_dir(home) / pool.id
    folder.mkdir(parents=True)
    pools.write(folder, pool)
    return home


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_pool_whose_keeper_died_reads_terminated_and_its_record_stays(tmp_path: Path) -> None:
    home = _home_with(tmp_path, S.IN_USE, _dead_pid())
    [seen] = pools.pools(home)
    assert seen.status is S.TERMINATED and seen.reason == "keeper gone"
    assert pools.read(pools.pools_dir(home) / "pool-0").status is S.IN_USE


def test_release_and_claim_move_through_the_table(tmp_path: Path) -> None:
    home = _home_with(tmp_path, S.IN_USE, os.getpid())  # a live keeper (this process)
    pools.release(home, "pool-0", "j1", 60)
    folder = pools.pools_dir(home) / "pool-0"
    assert pools.read(folder).status is S.AVAILABLE and pools.read(folder).supervisor_pid is None
    claimed = pools.claim(home, "k", "j2", supervisor_pid=99)
    assert claimed is not None and claimed.status is S.IN_USE and claimed.supervisor_pid == 99
    assert pools.read(folder).jobs[-1]["job"] == "j2"


def test_the_keeper_ends_an_idle_pool_only(tmp_path: Path) -> None:
    """`_end_idle` leaves a pool a job claimed meanwhile; the keeper's last word ends either."""
    home = _home_with(tmp_path, S.IN_USE, os.getpid())
    folder = pools.pools_dir(home) / "pool-0"
    assert poolkeeper._end_idle(home, "pool-0", "KeepAlivePeriodInSeconds passed") is False
    assert pools.read(folder).status is S.IN_USE
    pools.update(home, "pool-0", lambda pool: poolkeeper._terminate(pool, "the keeper failed"))
    ended = pools.read(folder)
    assert ended.status is S.TERMINATED and ended.reason == "the keeper failed"
    # Ended twice (the keeper's `finally` after `_end_idle`): the first reason stays.
    assert poolkeeper._end_idle(home, "pool-0", "again") is True
    assert pools.read(folder).reason == "the keeper failed"
