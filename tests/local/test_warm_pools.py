"""Local warm pools (`KeepAlivePeriodInSeconds`): real jobs of 1-2 hosts x 1 worker on a pool's
template; reuse, the matching rules, expiry, stop (Python, CLI, UpdateTrainingJob), isolation
between consecutive jobs, failed and stopped jobs on a pool, home removal, memory pressure."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from ddpjob.cli import main as cli_main
from ddpjob.errors import UserInputError
from ddpjob.local.session import LocalSession
from ddpjob.local.warmpools.poolkeeper import MIN_AVAILABLE_ENV

from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    hash_in_an_interpreter,
    log_text,
    processes_under,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

pytestmark = pytest.mark.slow

KEEP_S = 60


def _request(session: LocalSession, tmp_path: Path, name: str, script: str = "noop.py", *,
             keep_alive: int | None = KEEP_S, hosts: int = 1, workers: int = 1,
             scripts: tuple[str, ...] = (), hyperparameters: dict[str, str] | None = None,
             **extra: Any) -> dict[str, Any]:
    source = source_tar(tmp_path / name, JOBS / script, *(JOBS / s for s in scripts))
    request = training_request(session, name, source, script, hosts=hosts, workers=workers,
                               hyperparameters=hyperparameters, **extra)
    if keep_alive is not None:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = keep_alive
    return request


def _run(session: LocalSession, request: dict[str, Any], status: str = "Completed") -> dict:
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, request["TrainingJobName"])
    assert job["TrainingJobStatus"] == status, job.get("FailureReason")
    return job


def _warm(session: LocalSession, name: str) -> dict[str, Any] | None:
    return session.describe(name).raw.get("WarmPoolStatus")


def _pool_of(session: LocalSession, name: str) -> dict[str, Any]:
    return next(p for p in session.warm_pools() if name in p["Jobs"])


def _terminated(session: LocalSession, name: str) -> dict[str, Any]:
    """The pool `name` ran on, once it has ended."""
    return wait_for(lambda: (p := _pool_of(session, name))["Status"] == "Terminated" and p,
                    60, f"the pool of {name} to end")


def _parents(session: LocalSession, name: str, hosts: int = 1) -> set[str]:
    logs = "".join(log_text(session, name, f"algo-{h + 1}") for h in range(hosts))
    return set(re.findall(r"rank \d parent: (.*)", logs))


def _spares_ready(session: LocalSession, name: str, count: int) -> None:
    """Wait until the template of the pool job `name` ran on said `count` spares were ready
    (in all, since it started)."""
    log = session.home / "pools" / _pool_of(session, name)["Name"] / "template.log"
    wait_for(lambda: log.read_text().count("spare worker interpreter") >= count, 120,
             f"{count} spare interpreters of the pool of {name}")


def _hashes(session: LocalSession, name: str, hosts: int) -> dict[str, str]:
    """rank -> its hash of a fixed string (`hash_probe.py`)."""
    logs = "".join(log_text(session, name, f"algo-{h + 1}") for h in range(hosts))
    return dict(re.findall(r"rank (\d) hash: (.*)", logs))


def test_the_ranks_on_a_pool_have_hash_seeds_of_their_own_or_the_one_the_job_fixes(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank of each job on a pool has its own str hash seed, as separate interpreters
    would: the first job's workers start on their own, the next job's are the spare
    interpreters the pool's template started meanwhile; a job that fixes PYTHONHASHSEED on
    the same pool has it in every rank."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    hashes = []
    for name in ("cold-seeds", "warm-seeds"):
        _run(session, _request(session, tmp_path, name, "hash_probe.py", hosts=2, workers=2))
        hashes.append(_hashes(session, name, 2))
        assert sorted(hashes[-1]) == ["0", "1", "2", "3"]
        _spares_ready(session, name, 4 * len(hashes))  # each worker's request started one
    assert len(set(hashes[0].values()) | set(hashes[1].values())) == 8, hashes
    parents = _parents(session, "warm-seeds", 2)
    assert all(p.strip().startswith("ddpjob-spare-worker ") for p in parents), parents
    _run(session, _request(session, tmp_path, "fixed-seed", "hash_probe.py", hosts=2,
                           workers=2, Environment={"PYTHONHASHSEED": "7"}))
    assert _pool_of(session, "fixed-seed")["Jobs"] == ["cold-seeds", "warm-seeds", "fixed-seed"]
    assert set(_hashes(session, "fixed-seed", 2).values()) == {hash_in_an_interpreter("7")}
    session.stop_warm_pool(_pool_of(session, "fixed-seed")["Name"])
    assert_no_processes(session.home)


def test_a_matching_job_starts_on_the_pool_the_last_one_left(
    session: LocalSession, tmp_path: Path
) -> None:
    first = _run(session, _request(session, tmp_path, "first", "parent_probe.py", hosts=2))
    assert first["WarmPoolStatus"]["Status"] == "Available"
    assert "reusing" not in first["SecondaryStatusTransitions"][0]["StatusMessage"]
    _spares_ready(session, "first", 2)
    second = _run(session, _request(session, tmp_path, "second", "parent_probe.py", hosts=2))
    assert second["WarmPoolStatus"]["Status"] == "Available"
    pool = _pool_of(session, "second")
    assert pool["Jobs"] == ["first", "second"] and pool["Status"] == "Available"
    assert second["SecondaryStatusTransitions"][0]["StatusMessage"] == (
        f"Preparing the instances for training: reusing the warm pool {pool['Name']} of "
        f"training job first")
    reused = _warm(session, "first")
    assert reused["Status"] == "Reused" and reused["ReusedByJob"] == "second"
    assert reused["ResourceRetainedBillableTimeInSeconds"] >= 0
    # the first job's workers start on their own, the second's are the pool's spares
    assert all(p.strip().startswith("ddpjob-agent algo-") for p in _parents(session, "first", 2))
    assert all(pool["Name"] in p for p in _parents(session, "second", 2))
    session.stop_warm_pool(pool["Name"])
    assert _terminated(session, "second")["Reason"] == "stopped by the user"
    assert _warm(session, "second")["Status"] == "Terminated"
    assert _warm(session, "first")["Status"] == "Reused"
    assert_no_processes(session.home)


def test_a_job_that_differs_starts_cold_and_the_cli_stops_every_pool(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _run(session, _request(session, tmp_path, "one-host"))
    _run(session, _request(session, tmp_path, "two-hosts", hosts=2))
    _run(session, _request(session, tmp_path, "other-role",
                           RoleArn="arn:aws:iam::111111111111:role/Other"))
    plain = _run(session, _request(session, tmp_path, "no-keep-alive", keep_alive=None))
    assert "WarmPoolStatus" not in plain
    assert "reusing" not in plain["SecondaryStatusTransitions"][0]["StatusMessage"]
    for name in ("one-host", "two-hosts", "other-role"):
        assert _warm(session, name)["Status"] == "Available"
        assert _pool_of(session, name)["Jobs"] == [name]
    config = tmp_path / "config.yaml"
    config.write_text(f"home: {session.home}\n")
    monkeypatch.setenv("DDPJOB_CONFIG", str(config))
    assert cli_main(["pools", "list"]) == 0
    listed = capsys.readouterr().out
    assert listed.count("Available") == 3 and "2 x local  job two-hosts" in listed
    assert cli_main(["pools", "stop", "--all"]) == 0
    for name in ("one-host", "two-hosts", "other-role"):
        assert _terminated(session, name)["Reason"] == "stopped by the user"
    capsys.readouterr()
    assert cli_main(["pools", "list"]) == 0
    assert capsys.readouterr().out.count("Terminated") == 3
    assert cli_main(["pools", "stop", "pool-nosuchpool"]) != 0
    # A name that leads out of the pools' folder names no pool, though a record lies there.
    record = session.home / "pools" / _pool_of(session, "one-host")["Name"] / "pool.json"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "pool.json").write_bytes(record.read_bytes().replace(b"Terminated", b"Available"))
    before = (outside / "pool.json").read_bytes()
    with pytest.raises(UserInputError, match="no warm pool named '../../outside'"):
        session.stop_warm_pool("../../outside")
    assert (outside / "pool.json").read_bytes() == before
    assert_no_processes(session.home)


def test_a_pool_ends_when_its_keep_alive_passes_and_leaves_no_process(
    session: LocalSession, tmp_path: Path
) -> None:
    _run(session, _request(session, tmp_path, "short", keep_alive=2))
    pool = _terminated(session, "short")
    assert pool["Reason"] == "KeepAlivePeriodInSeconds (2 s) passed"
    warm = _warm(session, "short")
    assert warm["Status"] == "Terminated" and warm["ResourceRetainedBillableTimeInSeconds"] >= 2
    assert_no_processes(session.home)
    later = _run(session, _request(session, tmp_path, "later"))  # starts cold: a new pool
    assert _pool_of(session, "later")["Jobs"] == ["later"]
    assert "reusing" not in later["SecondaryStatusTransitions"][0]["StatusMessage"]
    session.stop_warm_pool(_pool_of(session, "later")["Name"])
    assert_no_processes(session.home)


def test_update_training_job_with_keep_alive_0_ends_the_pool(
    session: LocalSession, tmp_path: Path
) -> None:
    _run(session, _request(session, tmp_path, "updated"))
    _run(session, _request(session, tmp_path, "plain", keep_alive=None))
    client = session.sagemaker_client
    with pytest.raises(ClientError, match="has no warm pool"):
        client.update_training_job(TrainingJobName="plain",
                                   ResourceConfig={"KeepAlivePeriodInSeconds": 0})
    client.update_training_job(TrainingJobName="updated",
                               ResourceConfig={"KeepAlivePeriodInSeconds": 0})
    assert "UpdateTrainingJob" in _terminated(session, "updated")["Reason"]
    assert_no_processes(session.home)


def test_nothing_of_one_job_reaches_the_next_on_the_same_pool(
    session: LocalSession, tmp_path: Path
) -> None:
    scripts = ("warm_trace_module.py",)
    _run(session, _request(session, tmp_path, "leaves", "warm_probe.py", scripts=scripts,
                           hyperparameters={"phase": "leave"}))
    port = re.search(r"rank 0 port (\d+)", log_text(session, "leaves", "algo-1")).group(1)
    _spares_ready(session, "leaves", 1)  # the next job's worker: a spare of the pool
    checks = _run(session, _request(session, tmp_path, "checks", "warm_probe.py",
                                    scripts=scripts,
                                    hyperparameters={"phase": "check", "port": port}))
    assert "rank 0 found: []" in log_text(session, "checks", "algo-1")
    assert "reusing the warm pool" in checks["SecondaryStatusTransitions"][0]["StatusMessage"]
    spares = _parents(session, "checks")  # the worker came from one of the pool's spares
    assert all(p.strip().startswith("ddpjob-spare-worker ") for p in spares), spares
    session.stop_warm_pool(_pool_of(session, "checks")["Name"])
    assert_no_processes(session.home)


def test_a_failed_or_stopped_job_leaves_the_pool_warm_and_no_process(
    session: LocalSession, tmp_path: Path
) -> None:
    _run(session, _request(session, tmp_path, "ok"))
    _run(session, _request(session, tmp_path, "fails", "fail_rank.py",
                           hyperparameters={"fail-rank": "0"}), status="Failed")
    assert _warm(session, "fails")["Status"] == "Available"  # an algorithm error keeps it
    assert _warm(session, "ok")["ReusedByJob"] == "fails"
    assert_no_processes(session.job_dir("fails"))
    session.sagemaker_client.create_training_job(
        **_request(session, tmp_path, "stopped", "sleep_forever.py"))
    log = session.job_dir("stopped") / "logs" / "algo-1.log"
    wait_for(lambda: log.exists() and "rank 0 sleeping" in log.read_text(), 120,
             "the job on the pool to run")
    assert _warm(session, "stopped") == {"Status": "InUse"}
    session.stop("stopped")
    assert wait_until_ended(session, "stopped")["TrainingJobStatus"] == "Stopped"
    assert _warm(session, "stopped")["Status"] == "Available"  # a stopped job keeps it too
    assert_no_processes(session.job_dir("stopped"))
    after = _run(session, _request(session, tmp_path, "after"))
    assert "of training job stopped" in after["SecondaryStatusTransitions"][0]["StatusMessage"]
    assert _pool_of(session, "after")["Jobs"] == ["ok", "fails", "stopped", "after"]
    session.stop_warm_pool(_pool_of(session, "after")["Name"])
    assert_no_processes(session.home)


def test_removing_the_home_ends_its_pools(tmp_path: Path) -> None:
    home = tmp_path / "home"
    session = LocalSession(home)
    _run(session, _request(session, tmp_path, "gone"))
    assert processes_under(home / "pools")  # the keeper and its template
    shutil.rmtree(home)
    assert_no_processes(home)
    assert not home.exists()  # the keeper did not write its end into a new home


def test_memory_pressure_ends_a_pool_once_its_job_ended(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MIN_AVAILABLE_ENV, str(1 << 40))  # more than any machine has
    _run(session, _request(session, tmp_path, "squeezed"))  # the job itself runs to its end
    assert _terminated(session, "squeezed")["Reason"].startswith("memory pressure: MemAvailable")
    assert_no_processes(session.home)
