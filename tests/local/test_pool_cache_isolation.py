"""A warm pool's cache is its own jobs' only: real jobs on no pool and on another pool try to
list, read and write a pool's cache by its real path (`<home>/pools/<id>/cache/<host>`) and
are refused, while the pool's next job finds and writes it (`pool_cache_reach.py`); without
the hosts' own namespaces the job's log says that the caches are not hidden."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession

from tests.conftest import HOST_NAMESPACES
from tests.local.conftest import JOBS, log_text, source_tar, training_request
from tests.local.test_pool_cache import stop_pools
from tests.local.test_warm_pools import _pool_of, _run

pytestmark = pytest.mark.slow

OTHER_ROLE = "arn:aws:iam::111111111111:role/Other"  # another role: another pool


def _job(session: LocalSession, tmp_path: Path, name: str, *, pool: bool = True,
         target: Path | None = None, **extra: object) -> None:
    script = "pool_cache_reach.py"
    hyperparameters = {"tag": name, **({"target": str(target)} if target else {})}
    request = training_request(session, name, source_tar(tmp_path / name, JOBS / script),
                               script, workers=1, hyperparameters=hyperparameters, **extra)
    if pool:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 60
    _run(session, request)


def _printed(session: LocalSession, name: str, what: str) -> dict | None:
    found = re.search(rf"{what}: (.*)", log_text(session, name, "algo-1"))
    return json.loads(found.group(1)) if found else None


def _refused(tries: dict[str, str]) -> bool:
    """Every try was refused; the pools' folder, if listed at all, showed nothing."""
    return (all(tries[k].startswith("refused") for k in ("list", "read", "write"))
            and tries["pools"] in ("ok []", "refused PermissionError"))


@HOST_NAMESPACES
def test_jobs_off_the_pool_cannot_reach_its_cache_by_its_real_path(
    session: LocalSession, tmp_path: Path
) -> None:
    try:
        _job(session, tmp_path, "owner")
        assert _printed(session, "owner", "own cache") == {}
        cache = session.home / "pools" / _pool_of(session, "owner")["Name"] / "cache" / "algo-1"
        assert (cache / "from-algo-1").read_text() == "owner"  # the real path it wrote
        _job(session, tmp_path, "plain", pool=False, target=cache)
        _job(session, tmp_path, "other", target=cache, RoleArn=OTHER_ROLE)
        assert _printed(session, "plain", "own cache") is None  # on no pool: none
        assert _printed(session, "other", "own cache") == {}  # its own pool's, empty
        for name in ("plain", "other"):
            tries = _printed(session, name, "tries")
            assert _refused(tries), (name, tries)
        _job(session, tmp_path, "owner-again")
        assert _pool_of(session, "owner-again")["Jobs"] == ["owner", "owner-again"]
        assert _printed(session, "owner-again", "own cache") == {"from-algo-1": "owner"}
        assert sorted(p.name for p in cache.iterdir()) == ["from-algo-1"]
        assert (cache / "from-algo-1").read_text() == "owner-again"
    finally:
        stop_pools(session)


def test_without_namespaces_a_pool_job_says_its_cache_is_not_hidden(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sandbox.SWITCH_ENV, "0")
    try:
        _job(session, tmp_path, "open")
        pools_folder = session.home / "pools"
        notes = [line for line in log_text(session, "open", "algo-1").splitlines()
                 if f"the warm pool's caches under {pools_folder} are not hidden" in line]
        assert len(notes) == 1, notes
    finally:
        stop_pools(session)
