"""End-to-end local jobs: real supervisors, real `ddpjob-train` hosts, real torchrun workers."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from ddpjob import PyTorch
from ddpjob.errors import JobFailedError, UserInputError
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    EXAMPLE,
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


def _members(uri: str) -> dict[str, bytes]:
    with tarfile.open(Path(uri.removeprefix("file://"))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _statuses(job: dict) -> list[str]:
    return [t["Status"] for t in job["SecondaryStatusTransitions"]]


def _in_order(seen: list[str], expected: list[str]) -> bool:
    """Whether `expected` appears in `seen` in this order (other states may sit between)."""
    it = iter(seen)
    return all(status in it for status in expected)


def test_two_jobs_at_once_one_host_two_workers(session: LocalSession, tmp_path: Path) -> None:
    """Two 1-host x 2-worker jobs side by side: own folders, own ports, both complete. Real
    torchrun, DDP (the example) and gloo; the jobs' fixed `PYTHONHASHSEED` has the workers
    forked from their templates (a hash seed per rank is not what this proves)."""
    client = session.sagemaker_client
    source = source_tar(tmp_path / "src", EXAMPLE / "train.py", JOBS / "noop.py")
    client.create_training_job(**training_request(
        session, "mnist-1x2", source, "train.py", hash_seed="0",
        hyperparameters={"epochs": "1", "samples": "512"},
    ))  # fmt: skip
    client.create_training_job(**training_request(session, "noop-1x2", source, "noop.py",
                                                  hash_seed="0"))
    listed = {j["TrainingJobName"] for j in session.list()}
    assert listed == {"mnist-1x2", "noop-1x2"}

    jobs = {name: wait_until_ended(session, name) for name in ("mnist-1x2", "noop-1x2")}
    for name, job in jobs.items():
        assert job["TrainingJobStatus"] == "Completed", (name, job.get("FailureReason"))
    ports = {
        json.loads((session.job_dir(n) / "hosts/algo-1/input/config/platform.json").read_text())[
            "master_port"
        ]
        for n in jobs
    }
    assert len(ports) == 2
    assert "rank 1 of 2 done" in log_text(session, "noop-1x2", "algo-1")
    assert "epoch 1/1" in log_text(session, "mnist-1x2", "algo-1")
    metrics = json.loads(
        _members(jobs["mnist-1x2"]["ModelArtifacts"]["S3ModelArtifacts"].replace(
            "model.tar.gz", "output.tar.gz"))["metrics.json"]
    )  # fmt: skip
    assert metrics["workers"] == 2
    assert _members(jobs["noop-1x2"]["ModelArtifacts"]["S3ModelArtifacts"]) == {}
    completed = session.list(StatusEquals="Completed", SortBy="Name")
    assert [j["TrainingJobName"] for j in completed] == ["mnist-1x2", "noop-1x2"]
    assert session.list(max_results=1, SortBy="Name")[0]["TrainingJobName"] == "mnist-1x2"
    assert_no_processes(session.home)
    _assert_private(session.home)


def _assert_private(home: Path) -> None:
    """The home and everything the jobs wrote in it are the user's only (0700 / 0600)."""
    paths = [home, *home.rglob("*")]
    names = {p.name for p in paths}
    assert {"request.json", "state.json", "algo-1.log", "hyperparameters.json",
            "model.tar.gz", "supervisor.log"} <= names
    # hosts/*/code/ holds the user's own files with their archive's modes (runtime's unpacker),
    # reachable only through the 0700 folders above them.
    shared = [f"{oct(p.lstat().st_mode & 0o777)} {p}" for p in paths
              if not p.is_symlink() and p.lstat().st_mode & 0o077 and "code" not in p.parts]
    assert not shared, shared


def test_a_failing_rank_fails_the_job_and_stops_every_host(
    session: LocalSession, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Rank 3 (on algo-2) raises: the job ends Failed naming host, rank and exception, and the
    failure reads like a compiler error: the cause first, then the user's traceback, nothing
    misleading around it (no traceback from the stopped host, no torchrun banner, no
    checkpoint said to be restored when there was none, no replay of the logs on attach).
    Real torchrun and a gloo group; the job's fixed `PYTHONHASHSEED` has the workers forked
    from the template (a hash seed per rank is not what this proves)."""
    source = source_tar(tmp_path / "src", JOBS / "fail_rank.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "fails", source, "fail_rank.py", hosts=2, workers=2, hash_seed="0",
        hyperparameters={"fail-rank": "3", "others-sleep": "1"},
        CheckpointConfig={"S3Uri": (tmp_path / "ckpt").as_uri()},
    ))  # fmt: skip
    job = wait_until_ended(session, "fails")
    assert job["TrainingJobStatus"] == "Failed"
    assert job["SecondaryStatus"] == "Failed"
    reason = job["FailureReason"]
    assert reason.startswith("AlgorithmError: host algo-2, rank 3"), reason
    assert "ValueError: boom on rank 3" in reason
    assert len(reason) <= 1024
    assert _statuses(job)[-1] == "Failed"
    logs = {host: log_text(session, "fails", host) for host in ("algo-1", "algo-2")}
    assert "ValueError: boom on rank 3" in logs["algo-2"]
    assert "received signal 15: stopping the workers" in logs["algo-1"]  # what happened
    assert "Traceback" not in logs["algo-1"]  # and no SignalException's, like a second crash
    for text in logs.values():
        assert "OMP_NUM_THREADS" not in text  # set for the workers as torchrun would, quietly
        assert "checkpoint restored: none yet" in text and "staged copy" not in text

    with pytest.raises(JobFailedError) as raised:
        PyTorch.attach("fails", session=session)  # waits, as the official SDK, without logs
    assert "[algo-" not in capsys.readouterr().out
    cause, *details = str(raised.value).splitlines()
    assert cause == ("Training job fails ended Failed: AlgorithmError: host algo-2, rank 3, "
                     "exit code 1: ValueError: boom on rank 3")
    assert raised.value.summary == cause
    traceback = details[details.index("Traceback (most recent call last):"):]
    assert "fail_rank.py" in traceback[1] and "worker.py" not in "\n".join(traceback)
    assert traceback[-1] == "ValueError: boom on rank 3"
    assert_no_processes(session.home)


ATTACH = textwrap.dedent("""
    import json, sys
    from ddpjob.local.session import LocalSession

    session = LocalSession(sys.argv[1])
    name = sys.argv[2]
    sleeping = set()
    for host, line in session.logs(name, follow=True):
        if "sleeping" in line:
            sleeping.add(host)
        if len(sleeping) == 2:
            break
    job = session.describe_training_job(name)  # the official session's names
    listed = [j["TrainingJobName"] for j in session.list()]
    assert session.stop_training_job(name) is None
    print(json.dumps({"status": job["TrainingJobStatus"], "secondary": job["SecondaryStatus"],
                      "listed": listed, "hosts": sorted(sleeping)}))
""")


def test_attach_describe_and_stop_from_another_process(
    session: LocalSession, tmp_path: Path
) -> None:
    """A second process follows the logs, describes, lists and stops a running job (with the
    official session's `describe_training_job` and `stop_training_job`). The job is a plain
    script on 2 hosts, no torchrun: what is proven is the supervisor's and the client's (the
    job outlives the notebook, both hosts' logs are followed, the stop ends every process)."""
    source = source_tar(tmp_path / "src", JOBS / "sleep_forever.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "sleeper", source, "sleep_forever.py", hosts=2, workers=1, distributed=False,
    ))  # fmt: skip
    wait_for(lambda: session.describe("sleeper").raw["SecondaryStatus"] == "Training",
             JOB_TIMEOUT_S, "the job to train")
    for bad in ("./sleeper", "../jobs/sleeper", "sleeper/", "/sleeper"):
        for call in (session.describe, session.stop, lambda n: list(session.logs(n))):
            with pytest.raises(UserInputError, match="job_name"):
                call(bad)
        with pytest.raises(ClientError, match="pattern"):
            session.sagemaker_client.describe_training_job(TrainingJobName=bad)
    assert session.describe("sleeper").raw["SecondaryStatus"] == "Training"  # untouched
    other = subprocess.run(
        [sys.executable, "-c", ATTACH, str(session.home), "sleeper"],
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    seen = json.loads(other.stdout.strip().splitlines()[-1])
    assert seen == {"status": "InProgress", "secondary": "Training", "listed": ["sleeper"],
                    "hosts": ["algo-1", "algo-2"]}  # fmt: skip

    job = wait_until_ended(session, "sleeper", timeout_s=60)
    assert job["TrainingJobStatus"] == "Stopped"
    assert job["SecondaryStatus"] == "Stopped"
    assert "FailureReason" not in job
    assert _statuses(job)[-2:] == ["Stopping", "Stopped"]
    assert_no_processes(session.home)
    with pytest.raises(session.sagemaker_client.exceptions.ClientError) as error:
        session.sagemaker_client.stop_training_job(TrainingJobName="sleeper")
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert "status Stopped" in error.value.response["Error"]["Message"]


def test_max_runtime_stops_the_job(session: LocalSession, tmp_path: Path) -> None:
    """MaxRuntimeInSeconds ends a job that runs too long: Stopped / MaxRuntimeExceeded (a
    plain script that imports no torch: the supervisor's timeout is the subject)."""
    source = source_tar(tmp_path / "src", JOBS / "sleep_forever.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "too-long", source, "sleep_forever.py", workers=1, distributed=False,
        StoppingCondition={"MaxRuntimeInSeconds": 2},
    ))  # fmt: skip
    job = wait_until_ended(session, "too-long", timeout_s=120)
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    assert job["FailureReason"].startswith("MaxRuntimeExceeded")
    assert_no_processes(session.home)


def test_a_dead_supervisor_fails_the_job_and_its_hosts_end(
    session: LocalSession, tmp_path: Path
) -> None:
    """If the supervisor is killed, describe says Failed (not InProgress forever); hosts end
    (a plain script that imports no torch: the subject is the supervisor's death)."""
    source = source_tar(tmp_path / "src", JOBS / "sleep_forever.py")
    client = session.sagemaker_client
    client.create_training_job(**training_request(
        session, "orphan", source, "sleep_forever.py", workers=1, distributed=False,
    ))  # fmt: skip
    wait_for(lambda: "sleeping" in log_text(session, "orphan", "algo-1")
             if (session.job_dir("orphan") / "logs/algo-1.log").exists() else False,
             JOB_TIMEOUT_S, "the job to run")  # fmt: skip
    # The supervisor records Training on its next look at the hosts, after the script printed.
    wait_for(lambda: client.control.store.state("orphan").status.value == "Training", 30,
             "the supervisor to record Training")
    pid = client.control.store.state("orphan").supervisor_pid
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    job = wait_until_ended(session, "orphan", timeout_s=30)
    assert job["TrainingJobStatus"] == "Failed"
    assert "supervisor" in job["FailureReason"] and str(pid) in job["FailureReason"]
    assert_no_processes(session.home)
    # Reading the job told what became of it, and changed nothing on disk.
    state_file = session.job_dir("orphan") / "state.json"
    before = state_file.read_bytes()
    assert session.describe("orphan").raw["TrainingJobStatus"] == "Failed"
    assert session.list()[0]["TrainingJobStatus"] == "Failed"
    assert state_file.read_bytes() == before
    assert client.control.store.state("orphan").status.value == "Training"
