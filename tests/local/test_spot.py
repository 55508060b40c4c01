"""Spot interruptions and lost hosts in real local jobs (2 hosts x 1 worker unless said).

`spot_train.py` holds in collectives (after checkpointing) on the starts the test names, so an
interruption asked for then lands during training; the notice's grace is shortened through
DDPJOB_SPOT_GRACE_S (what the supervisors started by the test inherit). Real torchrun, gloo
and the ranks' checkpoints; `_start`'s jobs fix `PYTHONHASHSEED`, so their workers are forked
from the job's (or the pool's) template: interruptions, not a hash seed per rank, are the subject.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest
from ddpjob.errors import UserInputError
from ddpjob.job_status import JobDescription
from ddpjob.local.base.interruptions import GRACE_ENV, Interruption
from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.session import LocalSession

from tests.local.conftest import (
    JOB_TIMEOUT_S,
    JOBS,
    assert_no_processes,
    local_session_at,
    log_text,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

pytestmark = pytest.mark.slow
SPOT = {"EnableManagedSpotTraining": True,
        "StoppingCondition": {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 900}}


@pytest.fixture(autouse=True)
def _short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GRACE_ENV, "10")


def _start(session: LocalSession, tmp_path: Path, name: str, *, hosts: int = 2,
           spot: bool = True, keep_alive: int = 0, **hps: str) -> Path:
    """Start `spot_train.py` as job `name`; its checkpoint folder."""
    source = source_tar(tmp_path / "src", JOBS / "spot_train.py")
    checkpoints = tmp_path / f"checkpoints-{name}"
    extra: dict[str, Any] = dict(SPOT) if spot else {}
    if "retries" in hps:
        extra["RetryStrategy"] = {"MaximumRetryAttempts": int(hps.pop("retries"))}
    request = training_request(
        session, name, source, "spot_train.py", hosts=hosts, workers=1, hyperparameters=hps,
        hash_seed="0", CheckpointConfig={"S3Uri": checkpoints.as_uri()}, **extra)
    if keep_alive:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = keep_alive
    session.sagemaker_client.create_training_job(**request)
    return checkpoints


def _ready(session: LocalSession, name: str, first_step: int) -> None:
    """Wait until rank 0 (algo-1) holds on the start at `first_step`."""
    ready = session.job_dir(name) / "hosts" / "algo-1" / "output" / "data" / f"ready-{first_step}"
    wait_for(ready.exists, JOB_TIMEOUT_S, f"{ready.name} from the job's rank 0")


def _history(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(t["Status"], t["StatusMessage"]) for t in job["SecondaryStatusTransitions"]]


def _logs(session: LocalSession, name: str, hosts: int = 2) -> str:
    return "".join(log_text(session, name, f"algo-{i}") for i in range(1, hosts + 1))


def _assert_nothing_left(session: LocalSession, name: str) -> None:
    assert_no_processes(session.home, timeout_s=10)
    leftovers = sorted(session.job_dir(name).glob("hosts/*/tmp"))
    assert leftovers == [], leftovers


def test_an_interruption_during_training_resumes_from_the_checkpoint_and_completes(
    session: LocalSession, tmp_path: Path
) -> None:
    checkpoints = _start(session, tmp_path, "spot-train", **{"hold-at": "0"})
    _ready(session, "spot-train", 0)
    session.interrupt("spot-train")
    job = wait_until_ended(session, "spot-train")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [s for s, _ in _history(job)]
    at = statuses.index("Interrupted")
    assert statuses[at:at + 3] == ["Interrupted", "Restarting", "Starting"], statuses
    assert statuses.count("Interrupted") == 1 and statuses[-1] == "Completed"
    assert _history(job)[at][1] == ("Spot interruption (interrupt): the capacity of every host "
                                    "was reclaimed; SIGTERM, then SIGKILL after 10 s")
    assert _history(job)[at + 1][1] == \
        "Restarting the training job after a spot interruption (attempt 2)"
    described = JobDescription.from_response(job)
    assert described.attempts == 2 and len(described.interruptions) == 1
    assert job["BillableTimeInSeconds"] == int(job["TrainingTimeInSeconds"] * 0.3)
    text = _logs(session, "spot-train")
    for rank in range(2):
        assert f"rank {rank} loaded None first 0" in text
        assert f"rank {rank} loaded 1 first 2" in text, text[-3000:]  # resumed at step 1's
        assert f"rank {rank} done" in text
    assert "rank 0 notes ['note-0']" in text  # written before the notice, never lost
    assert "Spot interruption (interrupt)" in log_text(session, "spot-train", "algo-1")
    assert (checkpoints / "note-0").is_file()
    # fresh hosts, the same template: it runs no job code, and a recovery need not pay its start
    supervisor = (session.job_dir("spot-train") / "supervisor.log").read_text()
    assert supervisor.count("started the job's template process") == 1, supervisor
    _assert_nothing_left(session, "spot-train")


def test_an_interruption_during_the_next_attempts_restore_and_two_in_a_row(
    session: LocalSession, tmp_path: Path
) -> None:
    _start(session, tmp_path, "spot-twice", **{"hold-at": "0"})
    _ready(session, "spot-twice", 0)
    session.interrupt("spot-twice")
    store = JobStore(session.home)

    def second_attempt_starts() -> bool:
        state = store.state("spot-twice")
        return state.attempt == 2 and state.status.value in ("Starting", "Downloading")

    wait_for(second_attempt_starts, JOB_TIMEOUT_S, "the second attempt to start")
    session.interrupt("spot-twice", host="algo-1")  # while the hosts restore the checkpoint
    job = wait_until_ended(session, "spot-twice")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [s for s, _ in _history(job)]
    assert statuses.count("Interrupted") == 2 and statuses.count("Restarting") == 2
    second = [i for i, s in enumerate(statuses) if s == "Interrupted"][1]
    assert "Training" not in statuses[statuses.index("Starting", 3):second], statuses
    assert "the capacity of host algo-1 was reclaimed" in _history(job)[second][1]
    assert JobDescription.from_response(job).attempts == 3
    text = _logs(session, "spot-twice")
    assert text.count("rank 0 loaded 1 first 2") >= 1, text[-3000:]  # the restore was intact
    assert "rank 0 done" in text and "rank 1 done" in text
    _assert_nothing_left(session, "spot-twice")


def test_an_interruption_during_the_final_upload_restarts_and_uploads_a_whole_model(
    session: LocalSession, tmp_path: Path
) -> None:
    _start(session, tmp_path, "spot-upload", hosts=1, **{"model-mb": "48"})
    wait_for(lambda: session.describe("spot-upload").secondary_status == "Uploading",
             JOB_TIMEOUT_S, "the job to upload its model")
    session.interrupt("spot-upload")
    job = wait_until_ended(session, "spot-upload")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [s for s, _ in _history(job)].count("Interrupted") == 1
    model = Path(job["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("file://"))
    with tarfile.open(model) as tar:  # whole: the second attempt's upload replaced the first's
        assert tar.getmember("weights.bin").size == 48 << 20
    text = log_text(session, "spot-upload", "algo-1")
    assert "rank 0 loaded 5 first 6" in text, text[-3000:]  # nothing left to train
    _assert_nothing_left(session, "spot-upload")


def test_scheduled_interruptions_fire_once_per_attempt(tmp_path: Path) -> None:
    planned = [Interruption(after_s=4), Interruption(within_s=(2.0, 4.0), seed=3)]
    with local_session_at(tmp_path / "home") as plain:
        session = LocalSession(plain.home, interruptions=planned)
        _start(session, tmp_path, "spot-planned", **{"steps": "30", "step-s": "0.3"})
        job = wait_until_ended(session, "spot-planned")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    interrupted = JobDescription.from_response(job).interruptions
    assert [t["StatusMessage"].split(":")[0] for t in interrupted] == \
        ["Spot interruption (schedule)"] * 2
    assert JobDescription.from_response(job).attempts == 3
    state = JobStore(tmp_path / "home").state("spot-planned")
    assert [i["attempt"] for i in state.interruptions] == [1, 2]
    assert 2.0 <= state.schedule[1]["at_s"] <= 4.0


def test_a_stop_during_the_notice_ends_the_job_stopped(
    session: LocalSession, tmp_path: Path
) -> None:
    _start(session, tmp_path, "spot-stop", hosts=1, **{"hold-at": "0", "ignore-sigterm": "true"})
    _ready(session, "spot-stop", 0)
    session.interrupt("spot-stop")
    wait_for(lambda: session.describe("spot-stop").secondary_status == "Interrupted",
             JOB_TIMEOUT_S, "the job to be interrupted")
    session.stop("spot-stop")
    job = wait_until_ended(session, "spot-stop")
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert [s for s, _ in _history(job)][-3:] == ["Interrupted", "Stopping", "Stopped"]
    _assert_nothing_left(session, "spot-stop")


def test_past_max_wait_an_interrupted_job_ends_max_wait_time_exceeded(
    session: LocalSession, tmp_path: Path
) -> None:
    source = source_tar(tmp_path / "src", JOBS / "sleep_forever.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, "spot-wait", source, "sleep_forever.py", hosts=1, workers=1,
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 40, "MaxWaitTimeInSeconds": 40}))
    log = session.job_dir("spot-wait") / "logs" / "algo-1.log"
    wait_for(lambda: log.exists() and "rank 0 sleeping" in log.read_text(), JOB_TIMEOUT_S,
             "the job to train")
    session.interrupt("spot-wait")
    job = wait_until_ended(session, "spot-wait")
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped",
                                                                  "MaxWaitTimeExceeded")
    assert job["FailureReason"].startswith("MaxWaitTimeExceeded: the spot job did not complete "
                                           "within MaxWaitTimeInSeconds (40 s)")
    assert "Interrupted" in [s for s, _ in _history(job)]
    _assert_nothing_left(session, "spot-wait")


def _start_resume_script(session: LocalSession, tmp_path: Path, name: str,
                         stopping: dict[str, int], **hps: str) -> None:
    """Start docs/rehearsal.md's resume code (`rehearsal_resume.py`) on one host, one process
    without torchrun, as a spot job; wait until it holds at step 3."""
    source = source_tar(tmp_path / "src", JOBS / "rehearsal_resume.py")
    session.sagemaker_client.create_training_job(**training_request(
        session, name, source, "rehearsal_resume.py", workers=1, distributed=False,
        hyperparameters=hps, CheckpointConfig={"S3Uri": (tmp_path / "ckpt").as_uri()},
        EnableManagedSpotTraining=True, StoppingCondition=stopping))
    ready = session.job_dir(name) / "hosts" / "algo-1" / "output" / "data" / "ready"
    wait_for(ready.exists, JOB_TIMEOUT_S, f"job {name} to hold at step 3")


def test_the_rehearsal_pages_resume_code_restarts_after_a_notice_and_trains_to_the_end(
    session: LocalSession, tmp_path: Path
) -> None:
    """Its script saves, leaves its loop and exits 0 on SIGTERM: the reclaimed host is gone
    all the same, so the job restarts and resumes, as on SageMaker."""
    _start_resume_script(session, tmp_path, "spot-resume", SPOT["StoppingCondition"])
    session.interrupt("spot-resume")
    job = wait_until_ended(session, "spot-resume")
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [s for s, _ in _history(job)]
    at = statuses.index("Interrupted")
    assert statuses[at:at + 3] == ["Interrupted", "Restarting", "Starting"], statuses
    text = log_text(session, "spot-resume", "algo-1")
    assert "left after step 3" in text and "loaded 3 first 4" in text, text[-3000:]
    assert "trained to step 14 of 15" in text
    _assert_nothing_left(session, "spot-resume")


def test_max_wait_ends_the_hosts_during_a_notice(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notice longer than what MaxWaitTimeInSeconds leaves is cut short: SIGTERM, 10 s,
    SIGKILL, as for any job past it (the script ignores SIGTERM)."""
    monkeypatch.setenv(GRACE_ENV, "600")  # longer than the test waits
    _start_resume_script(session, tmp_path, "spot-notice-wait",
                         {"MaxRuntimeInSeconds": 30, "MaxWaitTimeInSeconds": 30},
                         **{"ignore-sigterm": "true"})
    session.interrupt("spot-notice-wait")
    job = wait_until_ended(session, "spot-notice-wait")
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped",
                                                                  "MaxWaitTimeExceeded")
    assert [s for s, _ in _history(job)][-2:] == ["Interrupted", "MaxWaitTimeExceeded"]
    supervisor = (session.job_dir("spot-notice-wait") / "supervisor.log").read_text()
    assert "hosts still running 10 s after SIGTERM: SIGKILL" in supervisor, supervisor[-3000:]
    _assert_nothing_left(session, "spot-notice-wait")


@pytest.mark.parametrize(("retries", "keep_alive"), [(1, 0), (None, 0), (1, 600)],
                         ids=["retried", "failed", "warm-pool-retried"])
def test_a_lost_host_fails_the_job_or_is_retried(
    session: LocalSession, tmp_path: Path, retries: int | None, keep_alive: int
) -> None:
    name = f"lost-{retries}-{keep_alive}"
    extra = {"retries": str(retries)} if retries else {}
    _start(session, tmp_path, name, spot=False, keep_alive=keep_alive, **extra,
           **{"hold-at": "0"})
    _ready(session, name, 0)
    session.interrupt(name, notice=False)
    job = wait_until_ended(session, name)
    history = _history(job)
    assert ("Training", "Host algo-2 lost without notice (interrupt): SIGKILL") in history
    killed = "host algo-2: ddpjob-train was killed by SIGKILL"
    if retries:
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        assert ("Restarting", f"Restarting the training job (retry 1 of 1) after an internal "
                               f"error: {killed}") in history
        assert "rank 1 loaded 1 first 2" in _logs(session, name)
    else:
        assert job["TrainingJobStatus"] == "Failed"
        assert job["FailureReason"].startswith(f"AlgorithmError: {killed}"), job["FailureReason"]
    if keep_alive:  # the job ran on a warm pool it started, and left it warm
        assert job["WarmPoolStatus"]["Status"] == "Available", job.get("WarmPoolStatus")
        session.sagemaker_client.update_training_job(
            TrainingJobName=name, ResourceConfig={"KeepAlivePeriodInSeconds": 0})
    _assert_nothing_left(session, name)


def test_bad_interrupts_are_one_error_before_anything_happens(
    session: LocalSession, tmp_path: Path
) -> None:
    with pytest.raises(Exception, match="No training job named 'nope'"):
        session.interrupt("nope")
    _start(session, tmp_path, "on-demand", spot=False, hosts=1, **{"hold-at": "0"})
    with pytest.raises(UserInputError, match="needs a spot job"):
        session.interrupt("on-demand")
    with pytest.raises(UserInputError, match="notice must be True or False, got 'no'"):
        session.interrupt("on-demand", notice="no")  # type: ignore[arg-type]
    with pytest.raises(UserInputError, match="host 'algo-2' is not a host of this job"):
        session.interrupt("on-demand", host="algo-2", notice=False)
    session.stop("on-demand")
    wait_until_ended(session, "on-demand")
    with pytest.raises(UserInputError, match=r"the job has already ended \(Stopped\)"):
        session.interrupt("on-demand", notice=False)
    planned = LocalSession(session.home, interruptions=[Interruption(after_s=1)])
    request = training_request(session, "never", "file:///nowhere.tar.gz", "x.py")
    with pytest.raises(UserInputError, match=r"interruptions\[0\]: .*does not use spot"):
        planned.submit(request)
    assert not session.job_dir("never").exists()
