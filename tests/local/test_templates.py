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
    log_text,
    source_tar,
    training_request,
    wait_until_ended,
)

pytestmark = pytest.mark.slow


def _parents(session: LocalSession, tmp_path: Path, name: str) -> dict[str, str]:
    """rank -> the command line of the process that started it, from a 2-host x 2-worker job."""
    source = source_tar(tmp_path / name, JOBS / "parent_probe.py")
    session.sagemaker_client.create_training_job(
        **training_request(session, name, source, "parent_probe.py", hosts=2))
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert_no_processes(session.job_dir(name))
    logs = log_text(session, name, "algo-1") + log_text(session, name, "algo-2")
    return dict(re.findall(r"rank (\d) parent: (.*)", logs))


def test_the_ranks_of_every_host_are_forked_from_the_jobs_template(
    session: LocalSession, tmp_path: Path
) -> None:
    parents = _parents(session, tmp_path, "forked")
    assert sorted(parents) == ["0", "1", "2", "3"]
    # one template for both hosts, titled by its job
    assert {p.strip() for p in parents.values()} == {
        f"ddpjob-template {session.job_dir('forked')}"}, parents
    assert "template process" in (session.job_dir("forked") / "supervisor.log").read_text()


def test_without_templates_every_rank_is_started_by_its_agent(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDPJOB_PRELOAD", "0")
    parents = _parents(session, tmp_path, "cold")
    assert sorted(parents) == ["0", "1", "2", "3"]
    assert {r: p.strip() for r, p in parents.items()} == {  # each its host's agent, titled
        "0": "ddpjob-agent algo-1", "1": "ddpjob-agent algo-1",
        "2": "ddpjob-agent algo-2", "3": "ddpjob-agent algo-2"}
    assert not (session.job_dir("cold") / "logs" / "template.log").exists()


def test_torchruns_log_level_is_the_hosts_although_the_template_imported_torchrun(
    session: LocalSession, tmp_path: Path
) -> None:
    """The template imports torchrun's modules before any host's environment is known; the
    agents still log at the LOGLEVEL of the job's environment."""
    source = source_tar(tmp_path / "loud", JOBS / "noop.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "loud", source, "noop.py", hosts=2, Environment={"LOGLEVEL": "INFO"}))
    job = wait_until_ended(session, "loud")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    for host in ("algo-1", "algo-2"):
        assert "Rendezvous complete for workers" in log_text(session, "loud", host)
