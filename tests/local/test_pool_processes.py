"""What a job on a warm pool starts ends with the job, as without a pool: real jobs whose rank
starts a plain background child, one in a new session that ignores SIGTERM and a double-forked
daemon (`leave_processes.py`, or the same in a container command); once the job ended
(completed or failed) all three are gone, while the pool's template and spares stay and the
next job on the pool runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ddpjob.local.base import proctree
from ddpjob.local.session import LocalSession
from ddpjob.local.warmpools import pools

from tests.conftest import HOST_NAMESPACES
from tests.local.conftest import assert_no_processes, log_text, wait_for
from tests.local.test_warm_pools import _pool_of, _request, _run, _spares_ready, _warm

pytestmark = pytest.mark.slow


def _left_behind(session: LocalSession, name: str) -> dict[str, int]:
    """kind -> pid of what the job's rank 0 started to outlive it."""
    found = re.search(r"left behind: (.*)", log_text(session, name, "algo-1"))
    assert found, f"job {name} started no process to leave behind"
    return json.loads(found.group(1))


def _assert_ended_with_the_job(session: LocalSession, name: str) -> None:
    """Every process `name` left behind is gone (dead at once, reaped soon: no zombie)."""
    left = _left_behind(session, name)
    assert set(left) == {"plain", "setsid", "daemon"}
    assert not [kind for kind, pid in left.items() if proctree.is_alive(pid)], left
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in left.values()), 30,
             f"the processes {name} left behind to be reaped")


def _pool_record(session: LocalSession, name: str) -> pools.Pool:
    return pools.read(pools.pools_dir(session.home) / _pool_of(session, name)["Name"])


@pytest.mark.parametrize("preload", ["1", "0"], ids=["forked-hosts", "own-interpreters"])
def test_what_a_job_on_a_pool_starts_ends_with_it_and_the_pool_runs_the_next_job(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preload: str
) -> None:
    """With a template (hosts, agents and workers forked from the pool's) and without
    (`DDPJOB_PRELOAD=0`: every process an interpreter below the job's supervisor)."""
    monkeypatch.setenv("DDPJOB_PRELOAD", preload)
    _run(session, _request(session, tmp_path, "completes", "leave_processes.py"))
    _assert_ended_with_the_job(session, "completes")
    assert _warm(session, "completes")["Status"] == "Available"
    template = _pool_record(session, "completes").template_pid
    if preload == "1":
        assert proctree.is_alive(template)
        _spares_ready(session, "completes", 1)  # the next job's worker comes from a spare
    _run(session, _request(session, tmp_path, "fails", "leave_processes.py",
                           hyperparameters={"fail": "1"}), status="Failed")
    _assert_ended_with_the_job(session, "fails")
    assert _warm(session, "fails")["Status"] == "Available"
    _run(session, _request(session, tmp_path, "after"))
    pool = _pool_of(session, "after")
    assert pool["Jobs"] == ["completes", "fails", "after"] and pool["Status"] == "Available"
    assert _pool_record(session, "after").template_pid == template  # the same template ran
    assert preload == "0" or proctree.is_alive(template)  # all three jobs, and stays
    session.stop_warm_pool(pool["Name"])
    assert_no_processes(session.home)


def test_without_a_pool_what_a_job_starts_ends_with_it_too(
    session: LocalSession, tmp_path: Path
) -> None:
    """The job's own template is a subreaper as well: what it adopted goes to the supervisor
    when the template ends, which ends it."""
    _run(session, _request(session, tmp_path, "plain", "leave_processes.py", keep_alive=None))
    _assert_ended_with_the_job(session, "plain")
    _run(session, _request(session, tmp_path, "plain-fails", "leave_processes.py",
                           keep_alive=None, hyperparameters={"fail": "1"}), status="Failed")
    _assert_ended_with_the_job(session, "plain-fails")
    assert not session.warm_pools()
    assert_no_processes(session.home)


# A container command's script that leaves the same three behind; `$1`: its exit code.
LEAVE_IN_BASH = """
exec </dev/null
sleep 600 >/dev/null 2>&1 & plain=$!
setsid sh -c "trap '' TERM; exec sleep 600" >/dev/null 2>&1 & detached=$!
pid=/opt/ml/output/data/daemon.pid
(setsid sh -c "echo \\$\\$ > $pid.tmp; mv $pid.tmp $pid; exec sleep 600" >/dev/null 2>&1 &)
while [ ! -s $pid ]; do sleep 0.05; done
echo "left behind: {\\"plain\\": $plain, \\"setsid\\": $detached, \\"daemon\\": $(cat $pid)}"
exit $1
"""


def _container_request(session: LocalSession, name: str, code: int) -> dict:
    """A container command running `LEAVE_IN_BASH` from the channel `leave` (an argument
    holds at most 256 characters)."""
    folder = session.sagemaker_client.bucket_root / "leave"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "leave.sh").write_text(LEAVE_IN_BASH)
    return {
        "TrainingJobName": name, "RoleArn": session.resolve_role(None),
        "AlgorithmSpecification": {
            "TrainingImage": "ddpjob:local", "TrainingInputMode": "File",
            "ContainerEntrypoint": ["/bin/bash"],
            "ContainerArguments": ["/opt/ml/input/data/leave/leave.sh", str(code)]},
        "InputDataConfig": [{"ChannelName": "leave", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://sagemaker-local/leave",
            "S3DataDistributionType": "FullyReplicated"}}}],
        "OutputDataConfig": {"S3OutputPath": session.default_output_path()},
        "ResourceConfig": {"InstanceType": "local", "InstanceCount": 1, "VolumeSizeInGB": 1,
                           "KeepAlivePeriodInSeconds": 60},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


@HOST_NAMESPACES
def test_what_a_container_command_on_a_pool_starts_ends_with_it(
    session: LocalSession
) -> None:
    """A pool of jobs that run their own program (no template): their hosts are below the
    job's supervisor, which ends what they leave behind."""
    for name, code, status in (("cmd-completes", 0, "Completed"), ("cmd-fails", 3, "Failed")):
        _run(session, _container_request(session, name, code), status=status)
        _assert_ended_with_the_job(session, name)
        assert _warm(session, name)["Status"] == "Available"
    assert _pool_of(session, "cmd-fails")["Jobs"] == ["cmd-completes", "cmd-fails"]
    session.stop_warm_pool(_pool_of(session, "cmd-fails")["Name"])
    assert_no_processes(session.home)
