"""Which failed host's failure is a local job's FailureReason (a pure choice)."""

from __future__ import annotations

from ddpjob.local import failure_cause


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
    assert failure_cause.choose([stopped, fallout]) is fallout  # names a rank: closer to a cause
    two_users = [user, failure_cause.HostFailure("algo-1", user.text.replace("2", "1"), 11.5)]
    assert failure_cause.choose(two_users).host == "algo-1"  # then the earliest written
    assert failure_cause.choose([]) is None
