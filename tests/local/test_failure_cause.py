"""The job's FailureReason: the first cause among the hosts, the others as consequences."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddpjob.local.base import failure_cause
from ddpjob_runtime.shared import failure


def _host_output(tmp_path: Path, host: str, text: str, when: float) -> Path:
    """`tmp_path` as a job folder: the failure of `host` written in its root's output/."""
    output = tmp_path / "hosts" / host / "output"
    failure.write_failure(output, text, when)
    return output


def test_a_killed_host_beats_fallout_that_was_written_earlier(tmp_path: Path) -> None:
    fallout = _host_output(
        tmp_path, "algo-1", "host algo-1, rank 0, exit code 1: RuntimeError: Connection closed "
        "by peer\n\nTraceback ...", 10.0,
    )  # fmt: skip
    assert json.loads((fallout / "failure.json").read_text()) == {
        "time": 10.0, "consequence": True,
    }  # fmt: skip
    found = [
        failure_cause.read_host("algo-1", tmp_path, 1, 10.5),
        failure_cause.read_host("algo-2", tmp_path, -9, 11.0),
    ]
    text = failure_cause.reason(found, 1024)
    assert text.startswith("AlgorithmError: host algo-2: ddpjob-train was killed by SIGKILL\n")
    assert "consequences (later):\n- host algo-1, rank 0" in text


def test_among_causes_the_earliest_wins_and_the_reason_fits(tmp_path: Path) -> None:
    _host_output(tmp_path, "algo-1", "host algo-1, rank 1, exit code 3: x", 12)
    _host_output(
        tmp_path, "algo-2", "host algo-2, rank 2, exit code 1: ValueError\n\n" + "y" * 5000, 11
    )
    found = [failure_cause.read_host("algo-1", tmp_path, 3, 13),
             failure_cause.read_host("algo-2", tmp_path, 1, 13)]
    text = failure_cause.reason(found, 1024)
    assert text.startswith("AlgorithmError: host algo-2, rank 2, exit code 1: ValueError")
    assert len(text) == 1024
    assert failure_cause.reason([], 1024) is None


def test_a_rank_killed_by_a_signal_is_the_cause_not_its_peers(tmp_path: Path) -> None:
    failure.record(failure.RankFailure(0, 1, "RuntimeError: Connection reset by peer", time=5.0),
                   tmp_path)  # fmt: skip
    failure.record(failure.RankFailure(1, 137, "the worker was killed by SIGKILL", time=6.0),
                   tmp_path)  # fmt: skip
    ignored = failure.RankFailure(1, 1, "later, by the launcher", time=7.0)
    failure.record(ignored, tmp_path, keep_existing=True)
    first = failure.first_failure(tmp_path)
    assert (first.rank, first.exception) == (1, "the worker was killed by SIGKILL")


def test_the_cause_is_the_users_exception_not_the_fallout_on_other_hosts() -> None:
    user = failure_cause.HostFailure(
        "algo-2", "host algo-2, rank 1, exit code 1: ValueError: boom\n\nTraceback...", 12.0
    )
    fallout = failure_cause.HostFailure(
        "algo-1", "host algo-1, rank 0, exit code 1: RuntimeError: [../gloo/transport/tcp/"
        "pair.cc:534] Connection closed by peer [127.0.0.1]:4711", 11.0, seen_first=True,
    )  # fmt: skip
    stopped = failure_cause.HostFailure(
        "algo-3", "host algo-3, exit code 143: stopped by SIGTERM", 10.0
    )
    assert failure_cause.choose([fallout, stopped, user]) is user
    assert failure_cause.choose([stopped, fallout]) is stopped  # both fallout: the earliest
    two_users = [user, failure_cause.HostFailure("algo-1", user.text.replace("2", "1"), 11.5)]
    assert failure_cause.choose(two_users).host == "algo-1"  # then the earliest written
    assert failure_cause.choose([]) is None


def test_a_killed_host_says_which_signal_and_clear_forgets_a_failure(tmp_path: Path) -> None:
    killed = failure_cause.read_host("algo-2", tmp_path, -9, 1.0)
    assert killed.killed_by == "SIGKILL"
    crashed = failure_cause.read_host("algo-2", tmp_path, 1, 1.0)
    assert crashed.killed_by is None  # exited by itself: not known to be the platform's
    output = _host_output(tmp_path, "algo-1", "host algo-1, rank 0, exit code 1: x", 1.0)
    assert failure_cause.read_host("algo-1", tmp_path, 1, 2.0).killed_by is None
    failure_cause.clear(output)
    assert failure_cause.read_host("algo-1", tmp_path, -9, 2.0).killed_by == "SIGKILL"


def test_a_failure_file_a_rank_replaced_is_neither_followed_nor_waited_on(
        tmp_path: Path) -> None:
    """A rank writes its host's output/: a link to another file, or a FIFO, reads as no
    failure file (the host exited without one), never the linked bytes nor a wait."""
    secret = tmp_path / "secret.txt"
    secret.write_text("another user's secret\n")
    output = _host_output(tmp_path, "algo-1", "host algo-1, rank 0, exit code 1: x", 1.0)
    (output / failure.FAILURE_FILE).unlink()
    (output / failure.FAILURE_FILE).symlink_to(secret)
    linked = failure_cause.read_host("algo-1", tmp_path, 1, 2.0)
    assert "secret" not in linked.text and "without a failure file" in linked.text
    (output / failure.FAILURE_FILE).unlink()
    os.mkfifo(output / failure.FAILURE_FILE)  # an open() that follows it would block for ever
    assert "without a failure file" in failure_cause.read_host("algo-1", tmp_path, 1, 2.0).text


def test_a_reason_after_retries_says_how_many_and_why() -> None:
    reason = "AlgorithmError: host algo-2: ddpjob-train was killed by SIGKILL\nconsequences:\n- a"
    text = failure_cause.with_retries(reason, ["host algo-2: ddpjob-train was killed by SIGKILL"],
                                      1024)
    assert text.splitlines() == [
        "AlgorithmError: host algo-2: ddpjob-train was killed by SIGKILL, after 1 retry",
        "retries (earlier):",
        "- retry 1 after: host algo-2: ddpjob-train was killed by SIGKILL",
        "consequences:", "- a",
    ]
    two = failure_cause.with_retries("AlgorithmError: x", ["a", "b"], 40)
    assert two.startswith("AlgorithmError: x, after 2 retries\n") and len(two) == 40


TORCHRUN_LOG = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/opt/ml/input/data/code/train.py", line 42, in main
[rank3]:     raise ValueError(f"rank {rank} found a bad value at step {step}")
[rank3]: ValueError: rank 3 found a bad value at step 0
[rank2]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : 2 (local_rank: 0)
  exitcode  : -15 (pid: 6950)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_06:24:54
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 6952)
============================================================
"""


def test_torchruns_report_names_the_root_cause_rank_and_its_exception() -> None:
    assert failure_cause.torchrun_root_cause(TORCHRUN_LOG) == (
        3, "ValueError: rank 3 found a bad value at step 0")
    # A report whose rank printed no exception (killed), or no report at all: nothing.
    assert failure_cause.torchrun_root_cause(TORCHRUN_LOG.replace("[rank3]: ValueError",
                                                                  "[rank3]:  ValueError")) is None
    assert failure_cause.torchrun_root_cause("Traceback ...\nValueError: x\n") is None
