"""A local job's log names the rank of each line a worker wrote (issue 23): `[rank 3] line` in
its host's log (torchrun's `--tee` with ddpjob's prefix), shown as `[algo-2 rank 3] line`;
metric definitions still match; one short line says what the host starts."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.session import LocalSession
from ddpjob.training_job import TrainingJob

from tests.local.conftest import (
    JOB_TIMEOUT_S,
    JOBS,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

pytestmark = pytest.mark.slow


def test_each_worker_line_names_its_rank_and_metrics_still_match(
    session: LocalSession, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """2 hosts x 2 workers: every line of every rank reaches its own host's log whole, after
    `[rank <global rank>] `; `logs()` shows it as `[algo-N rank R]`; a metric's Regex finds its
    value behind the prefix; the host's log says what it starts in one line, not the command.
    Real torchrun (its `--tee`) and gloo barriers; the job's fixed `PYTHONHASHSEED` has the
    workers forked from the template (the lines, not a hash seed per rank, are the subject)."""
    name = "rank-lines"
    request = training_request(session, name, source_tar(tmp_path / "src", JOBS / "rank_lines.py"),
                               "rank_lines.py", hosts=2, hash_seed="0")
    request["AlgorithmSpecification"]["MetricDefinitions"] = [
        {"Name": "loss", "Regex": r"rank 3: loss=([0-9.]+)"}]
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")

    for host, ranks in (("algo-1", (0, 1)), ("algo-2", (2, 3))):
        lines = log_text(session, name, host).splitlines()
        for rank in ranks:
            expected = [f"step {step} of rank {rank}: loss={rank}.{step}5" for step in range(3)]
            expected += [f"a warning from rank {rank}", f"last words of rank {rank}"]
            assert [line for line in lines if line.endswith(f"rank {rank}") or
                    f"of rank {rank}:" in line] == [f"[rank {rank}] {text}" for text in expected]
        assert f"starting 2 processes on {host} (torchrun, CPU)" in lines[-10:] or any(
            line.endswith(f"starting 2 processes on {host} (torchrun, CPU)") for line in lines)
        assert not [line for line in lines if "launching:" in line]
        assert not [line for line in lines if re.search(r"rank [0-3]", line)
                    and not line.startswith("[rank ")]

    assert {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]} == {"loss": 3.25}
    TrainingJob(session, name).logs()
    shown = capsys.readouterr().out.splitlines()
    assert "[algo-2 rank 3] step 2 of rank 3: loss=3.25" in shown
    assert "[algo-1 rank 0] a warning from rank 0" in shown


def test_a_killed_hosts_workers_lines_reach_its_log(session: LocalSession, tmp_path: Path) -> None:
    """A host killed (SIGKILL) takes torchrun's agent, whose tail copies the workers' lines
    into the host's log, along: what it had not copied yet is added from the workers' files,
    once, after what it had. The worker stops its agent (SIGSTOP) before its last line, so the
    tail surely has not copied it when the test kills the host."""
    name = "killed-lines"
    source = source_tar(tmp_path / "src", JOBS / "last_words.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, "last_words.py", workers=1))
    out = session.job_dir(name) / "hosts" / "algo-1" / "output" / "data"
    log = session.job_dir(name) / "logs" / "algo-1.log"
    wait_for(lambda: log.exists() and "[rank 0] a line the agent copies" in log.read_text(),
             JOB_TIMEOUT_S, "the worker's first line in the host's log")
    (out / "go").touch()
    wait_for((out / "printed").exists, JOB_TIMEOUT_S, "the worker's last words")
    os.kill(JobStore(session.home).state(name).hosts["algo-1"].pid, signal.SIGKILL)
    assert wait_until_ended(session, name)["TrainingJobStatus"] == "Failed"
    assert_no_processes(session.home)
    lines = log_text(session, name, "algo-1").splitlines()
    worker = [line for line in lines if line.startswith("[rank 0] ")]
    assert worker == ["[rank 0] a line the agent copies",
                      "[rank 0] last words before the host is killed"], lines[-20:]
