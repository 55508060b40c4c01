"""A hostile rank (or another user) against `ddpjob stacks` and the supervisor's dump at a job's
end: what a rank writes in its stacks folder never truncates a file elsewhere, never blocks the
reader, is read up to a bound, and never decides which process is signalled; a process that
took a dead supervisor's pid is never taken for it."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddpjob.cli import main
from ddpjob.local.base import proctree
from ddpjob.local.session import LocalSession
from ddpjob.local.watch import stacks
from ddpjob_runtime.shared import contract, stackdump

from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    log_text,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

HOSTILE = JOBS / "hostile_rank.py"
JOB_START_S = 240  # guards against a hung test, not timing assertions
CLI_GUARD_S = 120

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root")


def _start(session: LocalSession, tmp_path: Path, name: str, hostile: str,
           **environment: str) -> Path:
    """A one-host, one-process torch-free job whose rank does `hostile` (`hostile_rank.py`);
    returns the job's folder once the rank did it."""
    request = training_request(session, name, source_tar(tmp_path / name, HOSTILE),
                               HOSTILE.name, workers=1, distributed=False)
    request["Environment"] = {"HOSTILE": hostile, **environment}
    session.sagemaker_client.create_training_job(**request)
    job_dir = session.job_dir(name)
    wait_for(lambda: f"hostile: {hostile or 'no'}\n" in _log(job_dir), JOB_START_S,
             f"the rank of {name} to be ready")
    return job_dir


def _log(job_dir: Path) -> str:
    path = job_dir / "logs" / "algo-1.log"
    return path.read_text() if path.exists() else ""


def _rank_pid(job_dir: Path) -> int:
    folder = job_dir / "hosts" / "algo-1" / contract.STACKS_DIR
    return json.loads(stackdump.info_file(folder, 0).read_text())["pid"]


def _stop(session: LocalSession, name: str) -> dict:
    session.stop(name)
    return wait_until_ended(session, name)


def _nobody() -> None:
    os.setuid(pwd.getpwnam("nobody").pw_uid)


@pytest.fixture
def victims() -> Iterator[list[subprocess.Popen]]:
    """Two processes outside any job: another user's and this user's own."""
    procs = [subprocess.Popen(["sleep", "600"], preexec_fn=_nobody),
             subprocess.Popen(["sleep", "600"])]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_dump_file_linked_elsewhere_truncates_nothing(
        session: LocalSession, tmp_path: Path, config: Path,
        capsys: pytest.CaptureFixture) -> None:
    """The rank's dump file, a link to the job's own read-only request.json: neither `ddpjob
    stacks` nor the supervisor's dump as the job is stopped follows it."""
    target = tmp_path / "home" / "jobs" / "linked" / "request.json"
    job_dir = _start(session, tmp_path, "linked", "link", TARGET=str(target))
    before = target.read_bytes()
    assert main(["stacks", "linked"]) == 0
    assert "[algo-1 rank 0] did not answer" in capsys.readouterr().out
    assert target.read_bytes() == before
    assert main(["jobs", "list"]) == 0 and "linked" in capsys.readouterr().out
    assert _stop(session, "linked")["TrainingJobStatus"] == "Stopped"
    assert target.read_bytes() == before
    assert_no_processes(job_dir)


def test_a_dump_file_made_a_fifo_blocks_neither_stacks_nor_the_stop(
        session: LocalSession, tmp_path: Path, config: Path) -> None:
    """`ddpjob stacks` (its own process: it would block) answers, and a stop ends the job."""
    job_dir = _start(session, tmp_path, "fifo", "fifo")
    code = "from ddpjob.cli import main; raise SystemExit(main(['stacks', 'fifo']))"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=CLI_GUARD_S, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "[algo-1 rank 0] did not answer" in shown.stdout
    assert _stop(session, "fifo")["TrainingJobStatus"] == "Stopped"
    assert_no_processes(job_dir)


def test_a_forged_registration_signals_no_process_outside_the_job(
        session: LocalSession, tmp_path: Path, config: Path, capsys: pytest.CaptureFixture,
        victims: list[subprocess.Popen]) -> None:
    """A rank registers another user's process and one of this user's outside the job, with
    their true start times: neither `ddpjob stacks` nor the stop's dump signals them."""
    job_dir = _start(session, tmp_path, "forge", "forge",
                     VICTIMS=",".join(str(v.pid) for v in victims))
    assert main(["stacks", "forge"]) == 0
    shown = capsys.readouterr().out
    assert "[algo-1 rank 0] elsewhere" in shown and "rank 8" not in shown, shown
    assert [v.poll() for v in victims] == [None, None]
    assert _stop(session, "forge")["TrainingJobStatus"] == "Stopped"
    assert [v.poll() for v in victims] == [None, None]
    assert_no_processes(job_dir)


def test_a_rank_that_does_not_catch_the_signal_is_not_ended_by_it(
        session: LocalSession, tmp_path: Path, config: Path,
        capsys: pytest.CaptureFixture) -> None:
    """The stack signal's default action ends a process: a rank that reset it is not asked,
    lives on, and the job is stopped, not failed."""
    job_dir = _start(session, tmp_path, "default", "default")
    assert main(["stacks", "default"]) == 0
    assert "[algo-1 rank 0] did not answer" in capsys.readouterr().out
    assert proctree.is_alive(_rank_pid(job_dir))
    job = _stop(session, "default")
    assert job["TrainingJobStatus"] == "Stopped", job.get("FailureReason")
    assert_no_processes(job_dir)


def test_a_flood_of_a_dump_is_read_up_to_its_bound(
        session: LocalSession, tmp_path: Path, config: Path,
        capsys: pytest.CaptureFixture) -> None:
    """A rank that answers with 16 MiB: `ddpjob stacks` and the log get at most DUMP_LIMIT."""
    job_dir = _start(session, tmp_path, "flood", "flood")
    assert main(["stacks", "flood"]) == 0
    assert 0 < len(capsys.readouterr().out) < 2 * stacks.DUMP_LIMIT
    assert _stop(session, "flood")["TrainingJobStatus"] == "Stopped"
    assert len(log_text(session, "flood", "algo-1")) < 2 * stacks.DUMP_LIMIT
    assert_no_processes(job_dir)


def test_a_dead_supervisors_pid_taken_by_another_users_process_is_not_the_supervisor(
        session: LocalSession, tmp_path: Path, config: Path) -> None:
    """The supervisor dies; another user's process that got its pid, titled as the job's
    supervisor, neither makes the Failed job InProgress again nor gets `ddpjob stop`'s
    signal (its pid is written into the job's state: what a reuse of the pid would leave)."""
    job_dir = _start(session, tmp_path, "orphaned", "")
    store = session.sagemaker_client.control.store
    os.kill(store.state("orphaned").supervisor_pid, signal.SIGKILL)
    assert wait_until_ended(session, "orphaned")["TrainingJobStatus"] == "Failed"
    assert_no_processes(job_dir)
    # A shell waiting in its `read` builtin: `sh -c ... ddpjob-supervisor JOB_DIR` in `ps`.
    impostor = subprocess.Popen(["sh", "-c", "echo titled; read line", "ddpjob-supervisor",
                                 str(job_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, preexec_fn=_nobody, cwd="/")
    try:
        assert impostor.stdout.readline() == "titled\n"
        store.update("orphaned",
                     lambda state: setattr(state, "supervisor_pid", impostor.pid) or True)
        assert session.describe("orphaned").raw["TrainingJobStatus"] == "Failed"
        assert main(["stop", "orphaned"]) != 0
        assert impostor.poll() is None
    finally:
        impostor.kill()
        impostor.wait()


def test_a_stacks_folder_replaced_by_a_link_is_not_followed(tmp_path: Path) -> None:
    """A host whose `tmp/stacks` is a link to a folder elsewhere holding a registration of a
    live process and its dump file: the file is not emptied, the process not asked."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        stackdump.info_file(elsewhere, 0).write_text(json.dumps(
            {"pid": sleeper.pid, "start_time": proctree.started(sleeper.pid)}))
        stackdump.stacks_file(elsewhere, 0).write_text("precious")
        host = tmp_path / "job" / "hosts" / "algo-1"
        (host / "tmp").mkdir(parents=True)
        (host / contract.STACKS_DIR).symlink_to(elsewhere)
        roots = [(os.getpid(), proctree.started(os.getpid()))]
        assert stacks.collect(tmp_path / "job", ["algo-1"], roots=roots) == []
        assert stackdump.stacks_file(elsewhere, 0).read_text() == "precious"
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


_REGISTERED = """
import sys, time
from ddpjob_runtime.shared import stackdump

stackdump.register(0, sys.argv[1])
print("registered", flush=True)
time.sleep(600)
"""


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen]]:
    """A live process registered as rank 0 of host algo-1 of a job folder in `tmp_path`."""
    folder = tmp_path / "job" / "hosts" / "algo-1" / contract.STACKS_DIR
    rank = subprocess.Popen([sys.executable, "-c", _REGISTERED, str(folder)],
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert rank.stdout.readline() == "registered\n"
        yield folder, rank
    finally:
        rank.kill()
        rank.wait()


def _collect(tmp_path: Path) -> list[stacks.RankStacks]:
    """`collect` of the job folder in `tmp_path`, whose processes are the test's children."""
    roots = [(os.getpid(), proctree.started(os.getpid()))]
    return stacks.collect(tmp_path / "job", ["algo-1"], roots=roots)


def test_a_registration_of_odd_types_is_shown_not_raised(
        tmp_path: Path, registered: tuple[Path, subprocess.Popen]) -> None:
    """A rank's registration with the right pid and start time but a main thread and code
    folder of other types: its stacks are still shown."""
    folder, rank = registered
    stackdump.info_file(folder, 0).write_text(json.dumps(
        {"pid": rank.pid, "start_time": proctree.started(rank.pid), "main_thread": [],
         "code_dir": {"x": 1}}))
    assert "[algo-1 rank 0] elsewhere: <string>:" in stacks.report(_collect(tmp_path),
                                                                    ["algo-1"])


def test_a_process_registered_as_many_ranks_is_asked_once(
        tmp_path: Path, registered: tuple[Path, subprocess.Popen]) -> None:
    """Copies of a rank's registration under other rank numbers (each would be another dump
    read back): the process is one rank, the first."""
    folder, _rank = registered
    for number in range(1, 50):
        stackdump.info_file(folder, number).write_text(stackdump.info_file(folder, 0).read_text())
    assert [r.rank for r in _collect(tmp_path)] == [0]
