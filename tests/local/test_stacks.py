"""Where a hung rank is: `ddpjob stacks` on a running job, the stacks in the log and the end
reason naming the rank that was elsewhere, and every process of a job titled by its role."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ddpjob.cli import main
from ddpjob.errors import DdpjobError, JobNotFoundError
from ddpjob.local.base import proctree
from ddpjob.local.session import LocalSession
from ddpjob.local.watch import stacks
from ddpjob.pytorch import PyTorch
from ddpjob_runtime.shared import contract, stackdump

from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    log_text,
    processes_under,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

HUNG = "hung_rank.py"
SLOW_STEP = f"{HUNG}:13 in slow_step"  # rank 1's innermost frame in the job's code
ALL_REDUCE = f"{HUNG}:22 in main"  # where the other ranks called all_reduce
JOB_START_S = 240  # a guard against a hung test, not a timing assertion


def _start_hung(session: LocalSession, tmp_path: Path, name: str, max_run: int = 600) -> None:
    """A 2 hosts x 2 workers job whose rank 1 sleeps while the others wait in all_reduce;
    returns once every rank said it got there. Real torchrun and gloo; the job fixes
    `PYTHONHASHSEED`, so its workers are forked from the job's template (where there is one)."""
    source = source_tar(tmp_path / name, JOBS / HUNG)
    request = training_request(session, name, source, HUNG, hosts=2, hash_seed="0")
    request["StoppingCondition"] = {"MaxRuntimeInSeconds": max_run}
    session.sagemaker_client.create_training_job(**request)

    def there() -> bool:
        logs = session.job_dir(name) / "logs"
        text = "".join(p.read_text() for p in logs.glob("algo-*.log")) if logs.is_dir() else ""
        return text.count(" in all_reduce\n") == 3 and "rank 1 in slow_step\n" in text

    wait_for(there, JOB_START_S, f"the ranks of {name} to hang")


def _sections(text: str) -> dict[str, str]:
    """`[algo-N rank R]` -> what its header says of the rank."""
    return dict(re.findall(r"^\[(algo-\d rank \d)\] (.*)$", text, re.M))


def _titles(home: Path) -> list[str]:
    """The command lines (`ps`'s view) of the processes of the jobs in `home`."""
    found = []
    for pid in processes_under(home):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        found.append(" ".join(part.decode() for part in raw.split(b"\0") if part))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("preload", ["1", "0"], ids=["forked", "own-interpreters"])
def test_stacks_of_a_hung_job_name_the_rank_elsewhere_and_a_stop_logs_them(
    session: LocalSession, tmp_path: Path, config: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch, preload: str,
) -> None:
    """Forked from the job's template (the workers too: the job fixes its hash seed) or each
    process its own interpreter: the same titles and stacks."""
    monkeypatch.setenv("DDPJOB_PRELOAD", preload)
    _start_hung(session, tmp_path, "hung")
    job_dir = session.job_dir("hung")
    titles = _titles(session.home)
    template = {f"ddpjob-template {job_dir}"} if preload == "1" else set()
    expected = {f"ddpjob-supervisor {job_dir}", *template} | {
        f"ddpjob-{role} algo-{h}" for role in ("train", "agent") for h in (1, 2)} | {
        f"ddpjob-worker algo-{r // 2 + 1} rank {r}" for r in range(4)}
    assert expected <= set(titles), titles

    assert main(["stacks", "hung"]) == 0
    shown = capsys.readouterr().out
    assert _sections(shown) == {
        "algo-1 rank 0": f"waiting in all_reduce ({ALL_REDUCE})",
        "algo-1 rank 1": f"elsewhere: {SLOW_STEP}",
        "algo-2 rank 2": f"waiting in all_reduce ({ALL_REDUCE})",
        "algo-2 rank 3": f"waiting in all_reduce ({ALL_REDUCE})",
    }, shown
    note = (f"rank 1 on algo-1 was elsewhere ({SLOW_STEP}) while the others waited in a "
            f"collective")
    assert shown.splitlines()[0] == note
    assert "in slow_step" in shown and "distributed_c10d.py" in shown  # the stacks themselves
    PyTorch.attach("hung", session=session, wait=False).stacks()  # the estimator's way
    assert _sections(capsys.readouterr().out) == _sections(shown)

    session.stop("hung")
    job = wait_until_ended(session, "hung")
    assert job["TrainingJobStatus"] == "Stopped"
    assert job["SecondaryStatusTransitions"][-1]["StatusMessage"] == \
        f"The training job has stopped; {note}"
    first, second = log_text(session, "hung", "algo-1"), log_text(session, "hung", "algo-2")
    assert "the stacks of this host's ranks as the job ends (stop requested)" in first
    assert f"[algo-1 rank 1] elsewhere: {SLOW_STEP}" in first
    assert f"[algo-2 rank 3] waiting in all_reduce ({ALL_REDUCE})" in second
    assert_no_processes(session.job_dir("hung"))

    assert main(["stacks", "hung"]) == 3  # an ended job: one line, nothing signalled
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has already ended (Stopped)" in err
    with pytest.raises(DdpjobError, match="already ended"):
        session.stacks("hung")


@pytest.mark.slow
def test_a_hung_job_past_max_run_says_which_rank_was_elsewhere(
    session: LocalSession, tmp_path: Path
) -> None:
    _start_hung(session, tmp_path, "overdue", max_run=40)
    job = wait_until_ended(session, "overdue")
    assert job["SecondaryStatus"] == "MaxRuntimeExceeded"
    assert job["FailureReason"].startswith("MaxRuntimeExceeded: ")
    assert job["FailureReason"].endswith(
        f"; rank 1 on algo-1 was elsewhere ({SLOW_STEP}) while the others waited in a "
        f"collective")
    assert "(max runtime exceeded)" in log_text(session, "overdue", "algo-2")
    assert_no_processes(session.job_dir("overdue"))


@pytest.mark.slow
def test_stacks_of_a_job_on_a_warm_pool(session: LocalSession, tmp_path: Path, config: Path,
                                        capsys: pytest.CaptureFixture) -> None:
    """A rank on a warm pool runs below the pool's template, not below the job's supervisor:
    it is still a process of the job, and answers."""
    script = JOBS / "hostile_rank.py"  # without `HOSTILE`: a rank that only waits
    request = training_request(session, "pooled", source_tar(tmp_path / "pooled", script),
                               script.name, workers=1, distributed=False)
    request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 60
    session.sagemaker_client.create_training_job(**request)
    log = session.job_dir("pooled") / "logs" / "algo-1.log"
    wait_for(lambda: log.exists() and "hostile: no\n" in log.read_text(), JOB_START_S,
             "the rank on the pool to run")
    assert main(["stacks", "pooled"]) == 0
    assert "[algo-1 rank 0] elsewhere: hostile_rank.py:" in capsys.readouterr().out
    session.stop("pooled")
    assert wait_until_ended(session, "pooled")["TrainingJobStatus"] == "Stopped"
    session.stop_warm_pool(next(p["Name"] for p in session.warm_pools()))
    assert_no_processes(session.home)


def test_unknown_job_and_other_backends_are_one_clear_error(
    session: LocalSession, config: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(JobNotFoundError, match="no-such-job"):
        session.stacks("no-such-job")
    assert main(["stacks", "no-such-job"]) == 3
    assert "no training job named 'no-such-job'" in capsys.readouterr().err
    assert main(["stacks", "bad name"]) == 2
    assert "NAME 'bad name' is not allowed" in capsys.readouterr().err
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # a session; nothing is asked of AWS
    assert main(["stacks", "a-job", "--backend", "sagemaker"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only local jobs show their ranks' stacks" in err


# ------------------------------------------------------------------ the mechanism, without torch

_REGISTERED = textwrap.dedent("""
    import sys, time
    from ddpjob_runtime.shared import stackdump

    def nap():
        sys.stdout.write("registered\\n")
        sys.stdout.flush()
        time.sleep(600)

    stackdump.register(int(sys.argv[2]), sys.argv[1])
    nap()
""")


_US = [(os.getpid(), proctree.started(os.getpid()))]  # the test's processes are below it


def test_collect_asks_each_live_registered_rank_and_skips_the_ended(tmp_path: Path) -> None:
    """Real processes registered through `stackdump`, asked by `stacks.collect`: each answers
    with its stack and lives on; a rank whose process ended is not asked."""
    folder = tmp_path / "job" / "hosts" / "algo-1" / contract.STACKS_DIR
    procs = [subprocess.Popen([sys.executable, "-c", _REGISTERED, str(folder), str(rank)],
                              stdout=subprocess.PIPE, text=True, cwd=tmp_path)
             for rank in (0, 1)]
    try:
        for proc in procs:
            assert proc.stdout.readline() == "registered\n"
        procs[1].kill()
        procs[1].wait()
        ranks = stacks.collect(tmp_path / "job", ["algo-1", "algo-2"], roots=_US)
        assert [(r.host, r.rank) for r in ranks] == [("algo-1", 0)]
        assert ranks[0].collective() is None
        assert str(ranks[0].user_frame()).endswith(" in nap")
        assert procs[0].poll() is None  # the dump did not end it
        text = stacks.report(ranks, ["algo-1", "algo-2"])
        assert "[algo-1 rank 0] elsewhere: <string>:" in text
        assert "[algo-2] no live rank registered for stack dumps" in text
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """A registration whose process start time is not the live process's (the pid was reused)
    is skipped: the signal's default action would end an unrelated process."""
    folder = tmp_path / "job" / "hosts" / "algo-1" / contract.STACKS_DIR
    folder.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        start = stackdump.start_time(sleeper.pid)
        stackdump.info_file(folder, 0).write_text(
            f'{{"pid": {sleeper.pid}, "start_time": {start - 1}, "main_thread": 1}}')
        assert stacks.collect(tmp_path / "job", ["algo-1"], roots=_US) == []
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_hung_note_needs_ranks_in_a_collective_and_ranks_elsewhere() -> None:
    def rank(number: int, frames: list[str]) -> stacks.RankStacks:
        lines = "\n".join(f'  File "{f.split(":")[0]}", line {f.split(":")[1]} in '
                          f'{f.split(":")[2]}' for f in frames)
        text = f"Current thread 0x00000000000000ab (most recent call first):\n{lines}\n"
        return stacks.RankStacks("algo-1", number, text, 0xab, "/opt/ml/code")

    waiting = rank(0, ["/x/torch/distributed/distributed_c10d.py:3252:all_reduce",
                       "/x/torch/distributed/c10d_logger.py:83:wrapper",
                       "/opt/ml/code/train.py:20:main",
                       "<frozen runpy>:88:_run_code", "/x/ddpjob_runtime/job/worker.py:71:run"])
    busy = rank(1, ["/usr/lib/python3.11/threading.py:320:wait",
                    "/opt/ml/code/train.py:17:slow_step", "/opt/ml/code/train.py:30:main"])
    assert waiting.where() == "waiting in all_reduce (train.py:20 in main)"
    assert waiting.shown().splitlines()[-2:] == [
        '  File "/opt/ml/code/train.py", line 20 in main', "  ... 2 frames of the runtime"]
    assert busy.where() == "elsewhere: train.py:17 in slow_step"
    assert stacks.hung_note([waiting, busy]) == (
        "rank 1 on algo-1 was elsewhere (train.py:17 in slow_step) while the others waited in "
        "a collective")
    assert stacks.hung_note([busy]) is None and stacks.hung_note([waiting]) is None
    silent = stacks.RankStacks("algo-1", 2, "")
    assert stacks.hung_note([waiting, silent]) is None
    assert silent.where().startswith("did not answer")
    assert stacks.with_hung_note(None, None, "Stopped", 100) is None
    assert stacks.with_hung_note("A: b\n\ndetails", "note", "x", 100) == "A: b; note\n\ndetails"


_TITLED = textwrap.dedent("""
    import sys, time
    from ddpjob_runtime.shared import proctitle

    proctitle.set_title(sys.argv[1], sys.argv[2])
    sys.stdout.write("titled\\n")
    sys.stdout.flush()
    time.sleep(600)
""")


@pytest.mark.parametrize("role", ["supervisor", "pool-keeper"])
def test_a_titled_supervisor_or_pool_keeper_is_still_recognised(tmp_path: Path,
                                                                 role: str) -> None:
    """The client tells its live supervisors and pool keepers from reused pids by their command
    lines: titled ones too, and only those of their own job or pool."""
    from ddpjob.local.control.control_plane import LocalControlPlane
    from ddpjob.local.warmpools.pools import Pool, _is_keeper

    folder = tmp_path / "home" / "jobs" / "job-1"
    proc = subprocess.Popen([sys.executable, "-c", _TITLED, role, str(folder)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "titled\n"
        shown = Path(f"/proc/{proc.pid}/cmdline").read_bytes().rstrip(b"\0").decode()
        assert shown == f"ddpjob-{role} {folder}"
        if role == "supervisor":
            started = proctree.started(proc.pid)
            assert LocalControlPlane._is_supervisor(proc.pid, started)
            assert not LocalControlPlane._is_supervisor(proc.pid, started - 1)
        else:
            pool = Pool("job-1", "key", "Available", 60, "local", 1, keeper_pid=proc.pid)
            assert _is_keeper(pool)
            assert not _is_keeper(Pool("job-2", "key", "Available", 60, "local", 1,
                                       keeper_pid=proc.pid))
    finally:
        proc.kill()
        proc.wait()
