"""SageMaker's persistent warm-pool cache (`/opt/ml/sagemaker/warmpoolcache`) on local hosts:
real 2-host jobs on a pool, each host with its own cache that the next job on the pool finds,
none for a job on no pool or on another pool, gone when the pool ends; with and without the
hosts' own namespaces."""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession

from tests.conftest import HOST_NAMESPACES
from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_for,
)
from tests.local.test_warm_pools import _pool_of, _run, _terminated

pytestmark = pytest.mark.slow

HOSTS = ("algo-1", "algo-2")


def stop_pools(session: LocalSession) -> None:
    """Stop every pool `session` left and wait until they and their processes are gone."""
    for pool in session.warm_pools():
        if pool["Status"] != "Terminated":
            session.stop_warm_pool(pool["Name"])
    wait_for(lambda: all(p["Status"] == "Terminated" for p in session.warm_pools()), 60,
             "every pool to end")
    assert_no_processes(session.home)


@pytest.fixture
def stops_pools(session: LocalSession) -> Iterator[LocalSession]:
    """The session; every pool it left is stopped after the test, whatever happened."""
    try:
        yield session
    finally:
        stop_pools(session)


def _job(session: LocalSession, tmp_path: Path, name: str, path: str, *,
         keep_alive: int | None = 60, **extra: object) -> dict:
    script = "pool_cache_probe.py"
    request = training_request(session, name, source_tar(tmp_path / name, JOBS / script), script,
                               hosts=len(HOSTS), workers=1,
                               hyperparameters={"path": path, "tag": name}, **extra)
    if keep_alive is not None:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = keep_alive
    return _run(session, request)


def _seen(session: LocalSession, name: str, host: str) -> tuple[str, dict | None]:
    """(the cache variable, what the host found in its cache) of `name`'s `host`."""
    text = log_text(session, name, host)
    variable = re.search(rf"{host} cache variable: (.*)", text).group(1)
    found = re.search(rf"{host} cache found: (.*)", text)
    return variable, json.loads(found.group(1)) if found else None


def _cache_of(session: LocalSession, name: str) -> Path:
    return session.home / "pools" / _pool_of(session, name)["Name"] / "cache"


def _check_pool_cache(session: LocalSession, tmp_path: Path, path: str) -> dict[str, str]:
    """The shared story; returns each host's variable in the first job."""
    _job(session, tmp_path, "first", path)
    variables = {}
    for host in HOSTS:
        variables[host], found = _seen(session, "first", host)
        assert found == {}  # a new pool's cache is empty
    _job(session, tmp_path, "plain", path, keep_alive=None)  # on no pool: no cache
    _job(session, tmp_path, "other", path, RoleArn="arn:aws:iam::111111111111:role/Other")
    _job(session, tmp_path, "second", path)  # reuses the pool of "first"
    assert _pool_of(session, "second")["Jobs"] == ["first", "second"]
    for host in HOSTS:
        assert _seen(session, "plain", host) == ("None", None)
        assert _seen(session, "other", host)[1] == {}
        assert _seen(session, "second", host)[1] == {f"from-{host}": "first"}  # its own only
        folder = _cache_of(session, "second") / host
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert (folder / f"from-{host}").read_text() == "second"
        assert not (session.job_dir("second") / "hosts" / host / "sagemaker").exists()
    cache = _cache_of(session, "second")
    session.stop_warm_pool(_pool_of(session, "second")["Name"])
    _terminated(session, "second")
    wait_for(lambda: not cache.exists(), 30, "the pool's cache to be removed")
    return variables


@HOST_NAMESPACES
def test_each_host_finds_its_own_cache_at_sagemakers_path_on_the_next_job_of_the_pool(
    stops_pools: LocalSession, tmp_path: Path
) -> None:
    variables = _check_pool_cache(stops_pools, tmp_path, "hard")
    assert set(variables.values()) == {"/opt/ml/sagemaker/warmpoolcache"}


def test_without_namespaces_the_variable_names_each_hosts_cache(
    stops_pools: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sandbox.SWITCH_ENV, "0")
    variables = _check_pool_cache(stops_pools, tmp_path, "env")
    pool = stops_pools.home / "pools" / _pool_of(stops_pools, "first")["Name"]
    assert variables == {host: str(pool / "cache" / host) for host in HOSTS}
