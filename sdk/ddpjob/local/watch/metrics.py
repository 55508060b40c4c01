"""`MetricDefinitions` of a local job: each `Regex` is matched against every host's log as it is
written, as SageMaker matches it against the job's CloudWatch logs; the value is the first group
(`metric_matcher`: in bounded time per line, a stalling definition disabled with a warning).

The supervisor polls a `MetricCollector`, which appends every value to `<job dir>/metrics.jsonl`
(`{"MetricName", "Value", "Timestamp", "Host"}`, and `"Rank"` for a torchrun worker's line);
`final_metric_data` gives DescribeTrainingJob's `FinalMetricDataList` (the last value of each
metric) and `series` the time series that `ddpjob.analytics.metrics_for_job` (the estimator's
`training_job_analytics`) shows.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import contract

from ddpjob.local.watch.logtail import Tail
from ddpjob.local.watch.metric_matcher import Matcher

log = logging.getLogger(__name__)

SERIES_FILE = "metrics.jsonl"
_RANK = re.compile(contract.RANK_LINE_REGEX)


def definitions(request: dict[str, Any]) -> list[tuple[str, str]]:
    specs = (request.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
    return [(d["Name"], d["Regex"]) for d in specs]


def check(request: dict[str, Any]) -> str | None:
    """Why the MetricDefinitions cannot be used (one line), or None."""
    for i, (name, regex) in enumerate(definitions(request)):
        where = f"AlgorithmSpecification.MetricDefinitions[{i}] ({name!r}): Regex {regex!r}"
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            return f"{where} is not a valid regular expression ({exc})"
        if pattern.groups < 1:
            return f"{where} needs a capture group around the value, e.g. 'loss=([0-9.eE+-]+)'"
    return None


def _value(text: str | None) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type] - None is refused below
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _rank(line: str) -> dict[str, int]:
    """`{"Rank": R}` for a line a torchrun worker printed (`[rank R] ...`), else {}."""
    found = _RANK.match(line)
    return {"Rank": int(found.group(1))} if found else {}


class MetricCollector:
    """Follows every host's log of one job and records the metric values found in it."""

    def __init__(self, job_dir: Path, definitions: Sequence[tuple[str, str]],
                 log_paths: dict[str, Path]):
        self.path = job_dir / SERIES_FILE
        self.definitions = list(definitions)  # (Name, Regex)
        self.matcher = Matcher(self.definitions)  # never stalls on a catastrophic Regex
        self.tails = {host: Tail(path) for host, path in log_paths.items()}

    def poll(self, final: bool = False) -> int:
        """Record the values in the lines written since the last poll; how many were found.
        With `final`, an unterminated last line counts too (the writers have ended)."""
        if not self.definitions:
            return 0
        records = []
        now = time.time()
        for host, tail in self.tails.items():
            lines = tail.lines(final=final)
            for index, name, text in self.matcher.search(lines):
                if (value := _value(text)) is not None:
                    records.append({"MetricName": name, "Value": value, "Timestamp": now,
                                    "Host": host, **_rank(lines[index])})
        if records:
            with open(self.path, "a") as out:
                out.writelines(json.dumps(r) + "\n" for r in records)
        return len(records)

    def close(self) -> None:
        self.matcher.close()
        for tail in self.tails.values():
            tail.close()


def series(job_dir: Path) -> list[dict[str, Any]]:
    """Every recorded value of the job, oldest first (an empty list before the first)."""
    try:
        text = (job_dir / SERIES_FILE).read_text()
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:  # a line being appended right now
            continue
    return records


def final_metric_data(job_dir: Path) -> list[dict[str, Any]]:
    """DescribeTrainingJob's FinalMetricDataList: the last value of each metric."""
    last: dict[str, dict[str, Any]] = {}
    for record in series(job_dir):
        last[record["MetricName"]] = record
    return [{"MetricName": name, "Value": r["Value"],
             "Timestamp": dt.datetime.fromtimestamp(r["Timestamp"]).astimezone()}
            for name, r in last.items()]
