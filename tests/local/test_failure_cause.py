"""The job's FailureReason: the first cause among the hosts, the others as consequences."""

from __future__ import annotations

import json
from pathlib import Path

from ddpjob.local import failure_cause
from ddpjob_runtime import failure


def _host_output(tmp_path: Path, host: str, text: str, when: float) -> Path:
    output = tmp_path / host / "output"
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
        failure_cause.read_host("algo-1", fallout, 1, 10.5),
        failure_cause.read_host("algo-2", tmp_path / "algo-2" / "output", -9, 11.0),
    ]
    text = failure_cause.reason(found, 1024)
    assert text.startswith("AlgorithmError: host algo-2: ddpjob-train was killed by SIGKILL\n")
    assert "consequences (later):\n- host algo-1, rank 0" in text


def test_among_causes_the_earliest_wins_and_the_reason_fits(tmp_path: Path) -> None:
    late = _host_output(tmp_path, "algo-1", "host algo-1, rank 1, exit code 3: x", 12)
    early = _host_output(
        tmp_path, "algo-2", "host algo-2, rank 2, exit code 1: ValueError\n\n" + "y" * 5000, 11
    )
    found = [failure_cause.read_host("algo-1", late, 3, 13), failure_cause.read_host(
        "algo-2", early, 1, 13)]  # fmt: skip
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
