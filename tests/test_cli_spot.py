"""`ddpjob interrupt` and a job spec's `interruptions:`: real CLI processes and real local jobs
(`tests/local/jobs/spot_train.py`), bad input in-process (one line, exit 2, nothing started)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ddpjob.cli import main
from ddpjob.local.base.interruptions import GRACE_ENV
from ddpjob.local.session import LocalSession

from tests.conftest import GROUP_TEARDOWN
from tests.local.conftest import JOB_TIMEOUT_S, JOBS, assert_no_processes, wait_for
from tests.test_cli import (
    assert_nothing_local,
    cli,
    cli_env,
    kill_leftovers,
    one_line,
    write_yaml,
)

SPOT = {"use_spot_instances": True, "max_run": 600, "max_wait": 900}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A config naming a local home (DDPJOB_CONFIG, here and in child processes) and a project
    folder with `spot_train.py`; the notice's grace is short."""
    config = write_yaml(tmp_path / "config.yaml", {"home": str(tmp_path / "home")})
    monkeypatch.setenv("DDPJOB_CONFIG", str(config))
    monkeypatch.delenv("DDPJOB_HOME", raising=False)
    monkeypatch.setenv(GRACE_ENV, "10")
    (tmp_path / "src").mkdir()
    shutil.copy(JOBS / "spot_train.py", tmp_path / "src")
    yield tmp_path
    leftovers = kill_leftovers(tmp_path / "home")
    assert not leftovers, f"processes left behind by the test: {leftovers}"


def _spec(project: Path, name: str, **fields: Any) -> Path:
    return write_yaml(project / f"{name}.yaml", {
        "entry_point": "spot_train.py", "source_dir": "src", "instance_count": 1,
        "distribution": {"torch_distributed": {"enabled": True}, "processes_per_host": 1},
        "checkpoint_s3_uri": str(project / f"ckpt-{name}"), "job_name": name,
        "dependencies": [str(GROUP_TEARDOWN)], **fields})


@pytest.mark.slow
def test_a_spec_schedules_an_interruption_and_run_prints_the_savings(project: Path) -> None:
    spec = _spec(project, "cli-spot", **SPOT, interruptions=[{"after_s": 3}],
                 hyperparameters={"steps": 20, "step-s": 0.3})
    env = cli_env(project / "config.yaml")
    run = cli("run", "-f", str(spec), env=env, timeout=JOB_TIMEOUT_S)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    job = LocalSession(project / "home").describe("cli-spot")
    assert (job.attempts, len(job.interruptions)) == (2, 1)
    training, billable = job.raw["TrainingTimeInSeconds"], job.raw["BillableTimeInSeconds"]
    lines = run.stdout.splitlines()
    assert f"Training seconds: {training}" in lines and f"Billable seconds: {billable}" in lines
    assert f"Managed Spot Training savings: {(1 - billable / training) * 100:.1f}%" in lines
    listed = cli("jobs", "list", env=env)
    assert listed.stdout.split("\t")[-1].strip() == "2 attempts"
    ended = cli("interrupt", "cli-spot", env=env)
    assert ended.returncode == 2
    assert "the job has already ended (Completed)" in one_line(ended.stderr)


@pytest.mark.slow
def test_interrupt_reclaims_a_running_spot_job_that_then_completes(project: Path) -> None:
    spec = _spec(project, "cli-held", **SPOT, hyperparameters={"hold-at": "0"})
    env = cli_env(project / "config.yaml")
    started = cli("run", "-f", str(spec), "--no-wait", env=env)
    assert started.returncode == 0, started.stderr
    ready = project / "home" / "jobs" / "cli-held" / "hosts" / "algo-1" / "output" / "data"
    wait_for((ready / "ready-0").exists, JOB_TIMEOUT_S, "the job to hold")
    asked = cli("interrupt", "cli-held", "--host", "algo-1", env=env)
    assert (asked.returncode, asked.stdout) == (0, "cli-held: spot interruption (algo-1) "
                                                   "asked for\n"), asked.stderr
    session = LocalSession(project / "home")
    job = wait_for(lambda: (d := session.describe("cli-held")).is_terminal and d,
                   JOB_TIMEOUT_S, "the job to end")
    assert job.status == "Completed", job.failure_reason
    assert job.attempts == 2
    assert_no_processes(project / "home")


@pytest.mark.parametrize(("argv", "code", "fragment"), [
    (["interrupt", "nope"], 3, "no training job named 'nope'"),
    (["interrupt", "bad_name!"], 2, "NAME"),
])
def test_interrupt_of_no_such_job_is_one_line(project: Path, argv: list[str], code: int,
                                              fragment: str,
                                              capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == code
    assert fragment in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(("fields", "fragment"), [
    ({**SPOT, "interruptions": [{"after_s": 700}]}, "at or past the job's limit (600 s"),
    ({**SPOT, "interruptions": [{"within_s": [5, 1]}]}, "within_s must be a window"),
    ({**SPOT, "interruptions": [{"after_s": 1, "host": "algo-2"}]},
     "host 'algo-2' is not a host of this job"),
    ({"interruptions": [{"after_s": 1}]}, "this job does not use spot"),
    ({**SPOT, "interruptions": [{"at": 1}]}, "each interruption is a mapping of"),
    ({**SPOT, "interruptions": {"after_s": 1}}, "interruptions must be a list of mappings"),
    ({**SPOT, "interruptions": [{"after_s": 10**400}]},
     "after_s must be a finite number of seconds >= 0, got an integer of 401 digits"),
])
def test_a_spec_whose_interruptions_cannot_fire_starts_nothing(
    project: Path, fields: dict[str, Any], fragment: str, capsys: pytest.CaptureFixture,
) -> None:
    spec = _spec(project, "cli-bad", **fields)
    assert main(["run", "-f", str(spec)]) == 2
    captured = capsys.readouterr()
    line = one_line(captured.err)
    assert ": error: " in line and fragment in line, line
    assert_nothing_local(project / "home")
