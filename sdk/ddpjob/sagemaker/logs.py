"""Follow the CloudWatch logs of every host of a SageMaker training job.

SageMaker writes each host's stdout/stderr to the log group `/aws/sagemaker/TrainingJobs`, one
stream per host and container start: `<job>/algo-<N>-<epoch seconds>`. Streams appear as hosts
start, so they are rediscovered on every poll. Each stream is read forward from its last
`nextForwardToken`; CloudWatch returns the token it was given once the stream is exhausted, which
ends that stream's page loop (the official SDK instead re-reads the first page and skips events).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared.contract import CLOUDWATCH_LOG_GROUP as LOG_GROUP

from ddpjob.job_status import TERMINAL_STATUSES
from ddpjob.sagemaker.errors import aws_errors

if TYPE_CHECKING:  # pragma: no cover
    from botocore.client import BaseClient

_HOST = re.compile(r"algo-\d+")
_STREAMS_PAGE = 50  # the largest page DescribeLogStreams allows

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogPolling:
    """How often to poll: `initial` seconds after new lines, doubling up to `maximum` while idle."""

    initial: float = 1.0
    maximum: float = 20.0
    factor: float = 2.0
    #: Called with the delay in seconds; tests pass one that acts instead of waiting.
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    #: Events per GetLogEvents page; None lets CloudWatch choose (up to 1 MB / 10,000 events).
    page_limit: int | None = None

    def next_delay(self, delay: float, got_lines: bool) -> float:
        if got_lines:
            return self.initial
        return min(delay * self.factor, self.maximum)


def host_of(stream_name: str, job_name: str) -> str:
    """The host a stream belongs to: `job/algo-2-1700000000` -> `algo-2`."""
    rest = stream_name.removeprefix(job_name + "/")
    match = _HOST.search(rest)
    return match.group(0) if match else rest


@dataclass
class _Stream:
    name: str
    host: str
    token: str | None = None  # nextForwardToken of the last page read


class LogReader:
    """Reads what is new in every stream of one job's logs, merged in timestamp order."""

    def __init__(self, client: BaseClient, job_name: str, polling: LogPolling,
                 region: str | None = None):
        self._client = client
        self._job = job_name
        self._polling = polling
        self._region = region
        self._streams: dict[str, _Stream] = {}

    def discover(self) -> None:
        """Add streams that appeared since the last call (hosts start at different times)."""
        pages = self._client.get_paginator("describe_log_streams").paginate(
            logGroupName=LOG_GROUP, logStreamNamePrefix=self._job + "/", orderBy="LogStreamName",
            PaginationConfig={"PageSize": _STREAMS_PAGE})
        with aws_errors("DescribeLogStreams", region=self._region), contextlib.suppress(
                self._client.exceptions.ResourceNotFoundException):  # no job has logged yet
            for stream in (s for page in pages for s in page.get("logStreams", [])):
                name = stream["logStreamName"]
                if name not in self._streams:
                    logger.debug("following log stream %s", name)
                    self._streams[name] = _Stream(name, host_of(name, self._job))

    def read_new(self) -> list[tuple[str, str]]:
        """`(host, line)` of every event not read yet, in timestamp order across streams."""
        per_stream = [self._read_stream(stream) for stream in self._streams.values()]
        # Stable on ties: earlier-discovered streams first, each stream's own order kept.
        merged = heapq.merge(*per_stream, key=lambda item: item[0])
        return [(host, line) for _, host, line in merged]

    def _read_stream(self, stream: _Stream) -> list[tuple[int, str, str]]:
        events: list[tuple[int, str, str]] = []
        kwargs: dict[str, Any] = {
            "logGroupName": LOG_GROUP, "logStreamName": stream.name, "startFromHead": True,
        }
        if self._polling.page_limit:
            kwargs["limit"] = self._polling.page_limit
        with aws_errors("GetLogEvents", region=self._region):
            while True:
                if stream.token is not None:
                    kwargs["nextToken"] = stream.token
                page = self._client.get_log_events(**kwargs)
                for event in page.get("events", []):
                    events.append((event["timestamp"], stream.host,
                                   event["message"].rstrip("\n")))
                token = page.get("nextForwardToken")
                if token is None or token == stream.token:
                    return events  # the same token back: nothing more in this stream for now
                stream.token = token


def follow_logs(client: BaseClient, job_name: str, job_status: Callable[[], str], *,
                follow: bool = True, polling: LogPolling | None = None,
                region: str | None = None) -> Iterator[tuple[str, str]]:
    """Yield `(host, line)` of every host of `job_name`.

    Without `follow`, yield what exists now. With it, poll (backing off while nothing arrives)
    until `job_status()` is terminal, then wait one more poll interval for CloudWatch to ingest the
    last lines and drain once more.
    """
    polling = polling or LogPolling()
    reader = LogReader(client, job_name, polling, region=region)
    delay = polling.initial
    while True:
        terminal = follow and job_status() in TERMINAL_STATUSES
        reader.discover()
        lines = reader.read_new()
        yield from lines
        if not follow:
            return
        if terminal:
            polling.sleep(polling.initial)
            reader.discover()
            yield from reader.read_new()
            return
        delay = polling.next_delay(delay, bool(lines))
        polling.sleep(delay)
