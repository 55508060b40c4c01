"""Faults in real 2-host x 2-worker local jobs: the first failure is blamed, nothing is left.

Ranks 0-1 run on algo-1, ranks 2-3 on algo-2; rank 3 is the victim. Real torchrun agents,
restarts and gloo groups; every job fixes `PYTHONHASHSEED`, so its workers are forked from the
job's template (what is proven is what torchrun, the agents and the supervisor do when a rank,
an agent or a host fails, not a hash seed per rank).
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import socket
import threading
from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    JOB_TIMEOUT_S,
    JOBS,
    assert_no_processes,
    log_text,
    processes_under,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

pytestmark = pytest.mark.slow


def _listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses ("127.0.0.1", "0.0.0.0", "::", ...) of TCP listeners owned by `pids`."""
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                words = [raw[i : i + 4][::-1] for i in range(0, len(raw), 4)]
                packed = b"".join(words)
                found.add(ipaddress.ip_address(packed).compressed)
    return found


class _ListenerWatch(threading.Thread):
    """Samples the listeners of the processes under `home` while a job runs."""

    def __init__(self, home: Path):
        super().__init__(daemon=True)
        self.home, self.seen, self.tmp_dirs = home, set(), set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.seen |= _listening_addresses(processes_under(self.home))
            self.tmp_dirs |= {str(p) for p in self.home.glob("jobs/*/hosts/*/tmp/*")}


def _run(
    session: LocalSession, tmp_path: Path, name: str, **hps: str
) -> tuple[dict, _ListenerWatch]:
    source = source_tar(tmp_path / "src", JOBS / "faulty.py")
    watch = _ListenerWatch(session.home)
    watch.start()
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, "faulty.py", hosts=2, workers=2, hyperparameters=hps,
        hash_seed="0",
    ))  # fmt: skip
    try:
        job = wait_until_ended(session, name)
    finally:
        watch.done.set()
        watch.join()
    assert_no_processes(session.home, timeout_s=10)
    # Each host's temporary folder (torchrun's torchelastic_*, the rank records) is gone.
    assert not list(session.job_dir(name).glob("hosts/*/tmp"))
    return job, watch


@pytest.mark.parametrize(
    ("how", "headline"),
    [
        ("exit", "host algo-2, rank 3, exit code 3: the worker exited with code 3"),
        ("sigkill", "host algo-2, rank 3, exit code 137: the worker was killed by SIGKILL"),
        ("agent", "host algo-2, exit code 137: the launcher was killed by SIGKILL"),
        ("host", "host algo-2: ddpjob-train was killed by SIGKILL"),
    ],
)
def test_the_first_failure_is_blamed_and_the_others_are_consequences(
    session: LocalSession, tmp_path: Path, how: str, headline: str
) -> None:
    job, watch = _run(session, tmp_path, f"kill-{how}", victim="3", how=how)
    assert job["TrainingJobStatus"] == "Failed"
    reason = job["FailureReason"]
    assert reason.startswith(f"AlgorithmError: {headline}"), reason
    consequences = reason.split("consequences (later):\n", 1)[1]
    assert consequences.startswith("- host algo-1"), reason
    assert "algo-2" not in consequences.split("\n\n")[0], reason
    # torchrun's agent kept its files in the host's temporary folder, not in /tmp.
    assert any("/torchelastic_" in d for d in watch.tmp_dirs), watch.tmp_dirs


def test_a_clean_multi_host_run_binds_loopback_and_prints_no_traceback(
    session: LocalSession, tmp_path: Path
) -> None:
    """4 hosts x 1 worker: Completed, no exit-barrier error, every listener on 127.0.0.1."""
    source = source_tar(tmp_path / "src", JOBS / "faulty.py")
    watch = _ListenerWatch(session.home)
    watch.start()
    session.sagemaker_client.create_training_job(**training_request(
        session, "clean-4x1", source, "faulty.py", hosts=4, workers=1, hash_seed="0",
    ))  # fmt: skip
    try:
        job = wait_until_ended(session, "clean-4x1")
    finally:
        watch.done.set()
        watch.join()
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    for host in ("algo-1", "algo-2", "algo-3", "algo-4"):
        text = log_text(session, "clean-4x1", host)
        assert "done" in text
        assert not re.search(r"Traceback|exit barrier", text), text[-3000:]
    assert watch.seen == {"127.0.0.1"}, watch.seen
    assert_no_processes(session.home, timeout_s=10)
    assert not list(session.job_dir("clean-4x1").glob("hosts/*/tmp"))


def _restartable_job(
    session: LocalSession, tmp_path: Path, name: str, budget: int, **hps: str
) -> dict:
    """restartable.py on 2 hosts x 2 workers, rank 3 killed at step 3, checkpoints in file://."""
    source = source_tar(tmp_path / "src", JOBS / "restartable.py")
    request = training_request(
        session, name, source, "restartable.py", hosts=2, workers=2, hash_seed="0",
        hyperparameters={"victim": "3", "ddpjob_max_restarts": str(budget), **hps},
        CheckpointConfig={"S3Uri": (tmp_path / "checkpoints").as_uri()},
    )  # fmt: skip
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, name)
    assert_no_processes(session.home, timeout_s=10)
    return job


_KILLED = "host algo-2, rank 3, exit code 137: the worker was killed by SIGKILL"


def test_a_killed_rank_restarts_every_worker_from_the_latest_checkpoint(
    session: LocalSession, tmp_path: Path
) -> None:
    job = _restartable_job(session, tmp_path, "restart-once", budget=1)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    logs = {h: log_text(session, "restart-once", h) for h in ("algo-1", "algo-2")}
    for text in logs.values():
        # Every host's agent restarted its workers, and says why.
        assert f"restart 1 of 1 after: {_KILLED}" in text, text[-3000:]
    text = "\n".join(logs.values())
    for rank in range(4):
        # Step 2 was the last complete checkpoint before rank 3 died at the start of step 3.
        assert f"rank {rank} attempt 0 loaded None first 0" in text
        assert f"rank {rank} attempt 1 loaded 2 first 3" in text, text[-3000:]
        assert f"rank {rank} done" in text
    history = [t["StatusMessage"] for t in job["SecondaryStatusTransitions"]]
    assert any(_KILLED in message for message in history), history


def test_without_a_restart_budget_a_killed_rank_fails_the_job(
    session: LocalSession, tmp_path: Path
) -> None:
    job = _restartable_job(session, tmp_path, "restart-none", budget=0)
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith(f"AlgorithmError: {_KILLED}"), job["FailureReason"]
    assert "restart" not in job["FailureReason"]
    assert "attempt 1" not in log_text(session, "restart-none", "algo-2")


def test_a_spent_restart_budget_lists_each_restart_in_the_failure_reason(
    session: LocalSession, tmp_path: Path
) -> None:
    job = _restartable_job(session, tmp_path, "restart-spent", budget=1, always="true")
    assert job["TrainingJobStatus"] == "Failed"
    reason = job["FailureReason"]
    assert reason.startswith(f"AlgorithmError: {_KILLED}"), reason
    assert f"- restart 1 of 1 after: {_KILLED}" in reason, reason


def test_a_host_uploading_a_checkpoint_ends_within_seconds_of_its_supervisor(
    session: LocalSession, tmp_path: Path
) -> None:
    """Supervisor SIGKILLed while rank 0 uploads (its worker waits for the upload on SIGTERM):
    every process of the job is gone within 10 s, not after torchrun's 30 s + 30 s."""
    with socket.socket() as never_answers:  # accepts connections (backlog), never replies
        never_answers.bind(("127.0.0.1", 0))
        never_answers.listen(64)
        endpoint = f"http://127.0.0.1:{never_answers.getsockname()[1]}"
        source = source_tar(tmp_path / "src", JOBS / "stuck_upload.py")
        session.sagemaker_client.create_training_job(**training_request(
            session, "stuck-upload", source, "stuck_upload.py", hosts=2, workers=1,
            hyperparameters={"endpoint": endpoint}, hash_seed="0",
        ))  # fmt: skip
        log = session.job_dir("stuck-upload") / "logs" / "algo-1.log"
        wait_for(lambda: log.exists() and "rank 0 uploading" in log.read_text(),
                 JOB_TIMEOUT_S, "rank 0 to start its upload")  # fmt: skip
        supervisor = session.sagemaker_client.control.store.state("stuck-upload").supervisor_pid
        os.kill(supervisor, signal.SIGKILL)
        assert_no_processes(session.home, timeout_s=10)
