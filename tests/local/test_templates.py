"""Local jobs fork their agents and workers from the job's template process (torch imported
once per job), and start them on their own with `DDPJOB_PRELOAD=0`: real two-host jobs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    hash_in_an_interpreter,
    log_text,
    source_tar,
    training_request,
    wait_until_ended,
)

pytestmark = pytest.mark.slow


def _ranks(session: LocalSession, tmp_path: Path, name: str, script: str,
           **extra: object) -> dict[str, dict[str, str]]:
    """rank -> what `script` said ("parent": the command line of the process that started it,
    "hash": its hash of a fixed string), from a 2-host x 2-worker job."""
    source = source_tar(tmp_path / name, JOBS / script)
    session.sagemaker_client.create_training_job(
        **training_request(session, name, source, script, hosts=2, **extra))
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert_no_processes(session.job_dir(name))
    logs = log_text(session, name, "algo-1") + log_text(session, name, "algo-2")
    said: dict[str, dict[str, str]] = {}
    for rank, what, value in re.findall(r"rank (\d) (parent|hash|warnoptions): (.*)", logs):
        said.setdefault(rank, {})[what] = value
    return said


def _by_agent(rank: dict[str, str]) -> bool:
    """Whether a rank was started by its host's torchrun agent (as its own interpreter)."""
    return rank["parent"].strip().startswith("ddpjob-agent algo-")


def test_each_rank_has_a_hash_seed_of_its_own_as_separate_interpreters_would(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SageMaker each rank is an interpreter of its own with its own str hash seed: a rank
    forked from the job's template would share the template's with every other rank."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    said = _ranks(session, tmp_path, "seeds", "hash_probe.py")
    assert sorted(said) == ["0", "1", "2", "3"]
    assert len({rank["hash"] for rank in said.values()}) == 4, said
    assert all(_by_agent(rank) for rank in said.values()), said
    assert "template process" in (session.job_dir("seeds") / "supervisor.log").read_text()


def test_a_hash_seed_the_jobs_environment_fixes_is_every_ranks_and_they_fork(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `PYTHONHASHSEED` in the job's environment every interpreter of the job has that
    seed: the ranks are forked from the job's template, which was started with it."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    said = _ranks(session, tmp_path, "seeded", "hash_probe.py",
                  Environment={"PYTHONHASHSEED": "7"})
    assert sorted(said) == ["0", "1", "2", "3"]
    assert {rank["hash"] for rank in said.values()} == {hash_in_an_interpreter("7")}, said
    parents = {rank["parent"].strip() for rank in said.values()}
    assert parents == {f"ddpjob-template {session.job_dir('seeded')}"}, parents  # one template


def test_a_job_with_a_start_up_setting_a_fork_would_ignore_gets_interpreters_of_its_own(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked process keeps the template's interpreter settings: a job whose environment
    fixes the seed but also sets PYTHONWARNINGS gets its workers started as interpreters,
    which honour both."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    said = _ranks(session, tmp_path, "warned", "hash_probe.py",
                  Environment={"PYTHONHASHSEED": "7", "PYTHONWARNINGS": "error::UserWarning"})
    assert sorted(said) == ["0", "1", "2", "3"]
    assert {rank["hash"] for rank in said.values()} == {hash_in_an_interpreter("7")}, said
    assert {rank["warnoptions"] for rank in said.values()} == {"['error::UserWarning']"}, said
    assert all(_by_agent(rank) for rank in said.values()), said


def test_without_templates_every_rank_is_started_by_its_agent(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDPJOB_PRELOAD", "0")
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    said = _ranks(session, tmp_path, "cold", "hash_probe.py")
    assert sorted(said) == ["0", "1", "2", "3"]
    assert all(_by_agent(rank) for rank in said.values()), said
    assert len({rank["hash"] for rank in said.values()}) == 4, said
    assert not (session.job_dir("cold") / "logs" / "template.log").exists()


def test_torchruns_log_level_is_the_hosts_although_the_template_imported_torchrun(
    session: LocalSession, tmp_path: Path
) -> None:
    """The template imports torchrun's modules before any host's environment is known; the
    agents still log at the LOGLEVEL of the job's environment. The job fixes `PYTHONHASHSEED`:
    its workers fork from the template too (the agents' log level is the subject)."""
    source = source_tar(tmp_path / "loud", JOBS / "noop.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "loud", source, "noop.py", hosts=2, Environment={"LOGLEVEL": "INFO"},
        hash_seed="0"))
    job = wait_until_ended(session, "loud")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    for host in ("algo-1", "algo-2"):
        assert "Rendezvous complete for workers" in log_text(session, "loud", host)
