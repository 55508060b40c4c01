"""CloudWatch Logs' API over the hosts' log files of local jobs (see `official_session`).

As on SageMaker, a job's hosts log to the group `/aws/sagemaker/TrainingJobs`, one stream per
host named `<job>/algo-N-<epoch>` (the job's creation time); a stream exists once its host has
written something. Each line of a host's log file is an event; the tokens are byte offsets into
the file (`f/<offset>` forward, `b/<offset>` backward), so paging never re-reads or skips a line.
Every event of a stream carries the job's creation time: the lines have no time of their own,
and a timestamp that never changes keeps the official SDK v2's position keeping exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared.contract import CLOUDWATCH_LOG_GROUP as LOG_GROUP
from ddpjob_runtime.shared.contract import JOB_NAME_PATTERN

from ddpjob.job_status import TERMINAL_STATUSES
from ddpjob.local.aws.bucket_api import Answer, error
from ddpjob.local.control.control_plane import LocalControlPlane
from ddpjob.local.isolation import hostroot

LIMIT = 10000  # GetLogEvents' and FilterLogEvents' most events per answer
READ_BLOCK = 64 * 1024  # bytes read at a time when paging backwards
_BAD_TOKEN = error(400, "InvalidParameterException", "The specified nextToken is invalid.")


class JobLogStreams:
    """The log streams of the jobs of one local control plane (one home)."""

    def __init__(self, control: LocalControlPlane):
        self.control = control

    def knows(self, job: str) -> bool:
        """Whether `job` is a job of this home (its logs are here)."""
        return bool(JOB_NAME_PATTERN.match(job)) and self.control.store.exists(job)

    @staticmethod
    def job_of(params: dict[str, Any]) -> str:
        """The job whose streams a request names (by a stream, a prefix or a list of streams)."""
        names = params.get("logStreamNames") or [""]
        stream = params.get("logStreamName") or params.get("logStreamNamePrefix") or names[0]
        return stream.split("/", 1)[0]

    def _streams(self, group: str, prefix: str) -> dict[str, Path] | Answer:
        """`{stream name: log file}` of the streams under `prefix`, in name order."""
        if group != LOG_GROUP:
            return error(400, "ResourceNotFoundException", "The specified log group does not "
                                                           "exist.")
        job = prefix.split("/", 1)[0]
        if not self.knows(job):
            return {}
        epoch = int(self.control.store.state(job).creation_time)
        job_dir = self.control.store.job_dir(job)
        found = {f"{job}/{host}-{epoch}": hostroot.log_file(job_dir, host)
                 for host in self.control.store.job(job).hosts}
        return {name: path for name, path in sorted(found.items())
                if name.startswith(prefix) and path.is_file() and path.stat().st_size}

    def _ended(self, stream: str) -> bool:
        job = stream.split("/", 1)[0]
        status = self.control.describe_training_job(TrainingJobName=job)["TrainingJobStatus"]
        return status in TERMINAL_STATUSES

    def _as_events(self, stream: str, lines: list[bytes], first: int) -> list[tuple[dict, int]]:
        """Each whole line (newline stripped) as an event, with the offset after it; the
        first line starts at byte `first`."""
        stamp = int(self.control.store.state(stream.split("/", 1)[0]).creation_time * 1000)
        found, offset = [], first
        for line in lines:
            offset += len(line) + 1
            found.append(({"timestamp": stamp, "ingestionTime": stamp,
                           "message": line.decode("utf-8", "replace")}, offset))
        return found

    def _events(self, stream: str, path: Path, start: int, limit: int) -> list[tuple[dict, int]]:
        """The events of at most `limit` lines from byte `start` (only those are read); a last
        line without its newline counts once the job has ended."""
        lines: list[bytes] = []
        with open(path, "rb") as handle:
            handle.seek(start)
            while len(lines) < limit and (line := handle.readline()):
                if not line.endswith(b"\n") and not self._ended(stream):
                    break
                lines.append(line.removesuffix(b"\n"))
        return self._as_events(stream, lines, start)

    def _events_before(self, stream: str, path: Path, end: int,
                       limit: int) -> tuple[int, list[tuple[dict, int]]]:
        """(where the first of them starts, the events of) the last `limit` lines that end by
        byte `end`, read backwards in blocks: a page never reads the whole log."""
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            end, pos, data = min(end, size), min(end, size), b""
            while pos > 0 and data.count(b"\n") <= limit:
                pos = max(0, pos - READ_BLOCK)
                handle.seek(pos)
                data = handle.read(end - pos)
        if end == size and data and not data.endswith(b"\n") and self._ended(stream):
            data += b"\n"
        lines = data.split(b"\n")[:-1]
        if pos > 0:  # the block began inside a line: it is not whole
            pos += len(lines[0]) + 1
            lines = lines[1:]
        kept = lines[-limit:] if limit else []
        first = pos + sum(len(line) + 1 for line in lines[:len(lines) - len(kept)])
        return first, self._as_events(stream, kept, first)

    def describe_log_streams(self, params: dict[str, Any]) -> Answer:
        """DescribeLogStreams: the streams of a job (by `logStreamNamePrefix`)."""
        streams = self._streams(params["logGroupName"], params.get("logStreamNamePrefix", ""))
        if isinstance(streams, tuple):
            return streams
        names = sorted(streams, reverse=bool(params.get("descending")))
        token = params.get("nextToken") or "0"
        if not (token.isascii() and token.isdecimal() and len(token) < 10):
            return _BAD_TOKEN
        start, size = int(token), params.get("limit", 50)
        answer: dict[str, Any] = {"logStreams": [
            {"logStreamName": name, "creationTime": int(streams[name].stat().st_ctime * 1000),
             "lastIngestionTime": int(streams[name].stat().st_mtime * 1000),
             "storedBytes": streams[name].stat().st_size}
            for name in names[start:start + size]]}
        if start + size < len(names):
            answer["nextToken"] = str(start + size)
        return 200, answer

    def get_log_events(self, params: dict[str, Any]) -> Answer:
        """GetLogEvents: lines of one stream, forward from a token or the head, or the last
        ones before a backward token or the end."""
        name = params["logStreamName"]
        streams = self._streams(params["logGroupName"], name)
        if isinstance(streams, tuple):
            return streams
        if name not in streams:
            return error(400, "ResourceNotFoundException", "The specified log stream does not "
                                                           "exist.")
        limit, token = params.get("limit", LIMIT), params.get("nextToken") or ""
        size = streams[name].stat().st_size
        offset = _offset(token, size) if token else None
        if offset is None and token:
            return _BAD_TOKEN
        if token.startswith("f/") or (not token and params.get("startFromHead")):
            start = offset or 0
            read = self._events(name, streams[name], start, limit)
            end = read[-1][1] if read else start
        else:
            end = size if offset is None else offset
            start, read = self._events_before(name, streams[name], end, limit)
        events = [e for e, _ in read if e["timestamp"] >= params.get("startTime", 0)]
        return 200, {"events": events, "nextForwardToken": f"f/{end}",
                     "nextBackwardToken": f"b/{start}"}

    def filter_log_events(self, params: dict[str, Any]) -> Answer:
        """FilterLogEvents: the lines of the streams named (or under a prefix) that contain
        `filterPattern`, stream after stream; the token holds every stream's offset."""
        prefix = params.get("logStreamNamePrefix") or f"{self.job_of(params)}/"
        streams = self._streams(params["logGroupName"], prefix)
        if isinstance(streams, tuple):
            return streams
        wanted = params.get("logStreamNames") or list(streams)
        offsets = _offsets(params.get("nextToken") or "{}")
        if offsets is None:
            return _BAD_TOKEN
        found, left = [], params.get("limit", LIMIT)
        pattern = (params.get("filterPattern") or "").strip('"')
        for name in [n for n in streams if n in wanted]:
            read = self._events(name, streams[name], offsets.get(name, 0), left)
            offsets[name] = read[-1][1] if read else offsets.get(name, 0)
            left -= len(read)
            found += [{**e, "logStreamName": name, "eventId": f"{name}/{end}"}
                      for e, end in read if pattern in e["message"]]
        answer = {"events": found, "searchedLogStreams": [
            {"logStreamName": n, "searchedCompletely": True} for n in streams if n in wanted]}
        if left <= 0:
            answer["nextToken"] = json.dumps(offsets)
        return 200, answer


def _offset(token: str, size: int) -> int | None:
    """The byte offset of a GetLogEvents token this module gave out (`f/N`, `b/N`, at most one
    past the file's end), None for any other token."""
    kind, _, number = token.partition("/")
    if kind not in ("f", "b") or not (number.isascii() and number.isdecimal()):
        return None
    return int(number) if int(number) <= size + 1 else None


def _offsets(token: str) -> dict[str, int] | None:
    """The per-stream offsets of a FilterLogEvents token, None unless it is one of ours."""
    try:
        offsets = json.loads(token)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than json decodes
        return None
    if not isinstance(offsets, dict) or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in offsets.items()):
        return None
    return offsets
