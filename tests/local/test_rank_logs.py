"""A local job's log names the rank of each line a worker wrote (issue 23): `[rank 3] line` in
its host's log (torchrun's `--tee` with ddpjob's prefix), shown as `[algo-2 rank 3] line`;
metric definitions still match; one short line says what the host starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession
from ddpjob.training_job import TrainingJob

from tests.local.conftest import JOBS, log_text, source_tar, training_request, wait_until_ended

pytestmark = pytest.mark.slow


def test_each_worker_line_names_its_rank_and_metrics_still_match(
    session: LocalSession, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """2 hosts x 2 workers: every line of every rank reaches its own host's log whole, after
    `[rank <global rank>] `; `logs()` shows it as `[algo-N rank R]`; a metric's Regex finds its
    value behind the prefix; the host's log says what it starts in one line, not the command."""
    name = "rank-lines"
    request = training_request(session, name, source_tar(tmp_path / "src", JOBS / "rank_lines.py"),
                               "rank_lines.py", hosts=2)
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
