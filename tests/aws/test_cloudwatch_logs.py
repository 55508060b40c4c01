"""The CloudWatch follower against moto: paging, merging, late streams, backoff, termination."""

from __future__ import annotations

import pytest
from ddpjob.sagemaker.logs import LogPolling, LogReader, follow_logs, host_of
from ddpjob.sagemaker.session import Session


class Sleeps:
    """A `sleep` that records each delay and runs the step planned for that poll instead."""

    def __init__(self, steps=None):
        self.delays: list[float] = []
        self.steps = steps or {}

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        step = self.steps.get(len(self.delays))
        if step:
            step()


def _three_hosts(put_lines, job, base, per_host=25):
    """Interleaved events of algo-1..3; returns the expected (host, line) in timestamp order."""
    expected = []
    for host in (1, 2, 3):
        events = [(base + k * 10 + host, f"h{host} line {k}") for k in range(per_host)]
        put_lines(f"{job}/algo-{host}-1700000000", events)
        expected += [(ts, f"algo-{host}", msg) for ts, msg in events]
    return [(host, msg) for _, host, msg in sorted(expected)]


@pytest.mark.parametrize(("stream", "host"), [
    ("job-1/algo-2-1700000000", "algo-2"),
    ("job-1/algo-12-1700000000", "algo-12"),
    ("job-1/homogeneousCluster/algo-3-1700000000", "algo-3"),
    ("job-1/something-else", "something-else"),
])
def test_host_of(stream, host):
    assert host_of(stream, "job-1") == host


def test_backoff_doubles_while_idle_and_resets_on_lines():
    polling = LogPolling(initial=1, maximum=8)
    delays = [1.0]
    for got in (False, False, False, False, True, False):
        delays.append(polling.next_delay(delays[-1], got))
    assert delays == [1, 2, 4, 8, 8, 1, 2]


def test_every_line_once_in_timestamp_order_across_pages(logs, put_lines, job_name, now_ms):
    expected = _three_hosts(put_lines, job_name, now_ms)
    reader = LogReader(logs, job_name, LogPolling(page_limit=7))  # 25 events: 4 pages a stream
    reader.discover()
    assert reader.read_new() == expected
    assert reader.read_new() == []  # the end of each stream is not re-read

    put_lines(f"{job_name}/algo-2-1700000000", [(now_ms + 1000, "late on 2")])
    assert reader.read_new() == [("algo-2", "late on 2")]


def test_streams_of_other_jobs_are_ignored(logs, put_lines, job_name, now_ms):
    put_lines(f"{job_name}/algo-1-1700000000", [(now_ms, "mine")])
    put_lines(f"{job_name}-2/algo-1-1700000000", [(now_ms, "another job's")])
    assert list(follow_logs(logs, job_name, lambda: "Completed", follow=False)) == [
        ("algo-1", "mine")
    ]


def test_many_streams_are_discovered_across_pages(logs, put_lines, job_name, now_ms):
    for host in range(1, 56):  # DescribeLogStreams pages hold 50 streams
        put_lines(f"{job_name}/algo-{host}-1700000000", [(now_ms + host, f"hello from {host}")])
    lines = list(follow_logs(logs, job_name, lambda: "Completed", follow=False))
    assert lines == [(f"algo-{h}", f"hello from {h}") for h in range(1, 56)]


def test_no_log_group_yet_means_no_lines(aws_env, job_name):
    import boto3

    # A region where nothing has logged yet: the log group does not exist.
    client = boto3.client("logs", region_name="ap-southeast-2")
    assert list(follow_logs(client, job_name, lambda: "InProgress", follow=False)) == []


def test_follow_finished_job_drains_once_more_and_stops(
    logs, put_lines, job_name, now_ms, training_request
):
    expected = _three_hosts(put_lines, job_name, now_ms, per_host=5)
    sleeps = Sleeps({1: lambda: put_lines(f"{job_name}/algo-1-1700000000",
                                          [(now_ms + 5000, "ingested late")])})
    session = Session(log_polling=LogPolling(initial=1, sleep=sleeps))
    session.submit(training_request(job_name, instance_count=3))  # moto: Completed

    lines = list(session.logs(job_name, follow=True))
    assert lines == expected + [("algo-1", "ingested late")]
    assert sleeps.delays == [1]  # one wait for ingestion, then the final drain


def test_follow_picks_up_late_hosts_backs_off_and_stops_when_terminal(
    logs, put_lines, job_name, now_ms, training_request, set_job_status
):
    session = Session()
    session.submit(training_request(job_name, instance_count=3))
    set_job_status(job_name, "InProgress")
    put_lines(f"{job_name}/algo-1-1700000000", [(now_ms, "1 starts")])
    put_lines(f"{job_name}/algo-2-1700000000", [(now_ms + 1, "2 starts")])

    def host_3_starts():
        put_lines(f"{job_name}/algo-3-1700000100", [(now_ms + 2, "3 starts")])

    def job_ends():
        put_lines(f"{job_name}/algo-1-1700000000", [(now_ms + 9, "1 done")])
        set_job_status(job_name, "Completed")

    sleeps = Sleeps({1: host_3_starts, 5: job_ends})
    session.log_polling = LogPolling(initial=1, maximum=4, sleep=sleeps)

    lines = list(session.logs(job_name, follow=True))
    assert lines == [("algo-1", "1 starts"), ("algo-2", "2 starts"), ("algo-3", "3 starts"),
                     ("algo-1", "1 done")]
    # lines, lines, idle, idle, idle (capped at 4), then the final wait before the last drain
    assert sleeps.delays == [1, 1, 2, 4, 4, 1]


def test_without_follow_returns_what_exists_now(
    logs, put_lines, job_name, now_ms, training_request, set_job_status
):
    session = Session(log_polling=LogPolling(sleep=Sleeps()))
    session.submit(training_request(job_name))
    set_job_status(job_name, "InProgress")
    put_lines(f"{job_name}/algo-1-1700000000", [(now_ms, "so far")])
    assert list(session.logs(job_name, follow=False)) == [("algo-1", "so far")]
    assert session.log_polling.sleep.delays == []
