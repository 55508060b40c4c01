"""What a local tuning job shows of its trials that no tuner reports, each finding one line,
logged by the controller and kept in the tuning job's state (`TuningState.diagnostics`, a
trial's own in `Trial.diagnosis`) for `ddpjob tuning-jobs describe`:

- before the first trial, what the request shows its trials will miss (`parity`);
- a trial seen writing `/opt/ml/checkpoints` while the definition has no CheckpointConfig
  (once, as soon as a running or ended trial shows it);
- the objective metric printed by several hosts or ranks of one trial (once): SageMaker reads
  every copy as the same series, which misleads early stopping and Hyperband;
- a trial that completed without its objective metric ever matching: the log lines closest to
  its Regex, on the trial (logged for the first such trial).

The trials' files are untrusted: their logs are read from the end, at most `LOG_TAIL_BYTES` a
host, and no link is followed (`fsutil`).
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import contract, fsutil

from ddpjob.local.base.jobstore import JobStore
from ddpjob.local.tuning import answers
from ddpjob.local.tuning.tuningstate import Trial, TuningState
from ddpjob.local.tuning.tuningstore import TuningStore
from ddpjob.local.watch import metrics
from ddpjob.tuning import parity

log = logging.getLogger("ddpjob.local.tuning.controller")

LOG_TAIL_BYTES = 256 << 10  # of each host's log, for the lines closest to an unmatched Regex
CLOSEST = 3
LINE_CHARS = 160
_RANK = re.compile(contract.RANK_LINE_REGEX)
_RUNTIME = re.compile(r"\S+ \S+ ddpjob_runtime[.\s]")  # the runtime's own lines in a host's log
CHECKPOINT_PATH = f"{contract.DEFAULT_ROOT}/{contract.CHECKPOINTS_DIR}"


def checkpoint_writers(job_dir: Path, hosts: Iterable[str]) -> list[str]:
    """The hosts whose `/opt/ml/checkpoints` holds anything (never through a link)."""
    found = []
    for host in hosts:
        try:
            folder = fsutil.open_untrusted_folder(job_dir / "hosts",
                                                  f"{host}/{contract.CHECKPOINTS_DIR}")
        except (OSError, ValueError):  # none, or a link (UnsafePathError is a ValueError)
            continue
        try:
            if os.listdir(folder):
                found.append(host)
        finally:
            os.close(folder)
    return found


def repeated_by(records: Iterable[Mapping[str, Any]], metric: str) -> list[str]:
    """The hosts and ranks that printed `metric` (`metrics.series` records), when more than one
    did; [] otherwise."""
    speakers = {(str(r.get("Host", "")), r.get("Rank")) for r in records
                if r.get("MetricName") == metric}
    named = sorted(host if rank is None else f"{host} rank {rank}" for host, rank in speakers)
    return named if len(named) > 1 else []


def log_tail(job_dir: Path, host: str, limit: int = LOG_TAIL_BYTES) -> list[str]:
    """The last lines of host `host`'s log within its last `limit` bytes (the first, cut line
    left out); [] when there is no such regular file."""
    try:
        folder = fsutil.open_untrusted_folder(job_dir, "logs")
    except (OSError, ValueError):
        return []
    try:
        fd = fsutil.open_untrusted(f"{host}.log", folder)
    except OSError:
        return []
    finally:
        os.close(folder)
    try:
        start = max(0, os.fstat(fd).st_size - limit)
        data = os.pread(fd, limit, start)
    finally:
        os.close(fd)
    lines = data.decode(errors="replace").splitlines()
    return lines[1:] if start else lines


def regex_text(regex: str) -> str:
    """Roughly the text a line matching `regex` holds: each character class or wildcard as one
    digit, escapes as the characters they stand for, the other syntax left out."""
    text = re.sub(r"\[(?:\\.|[^\]\\])*\][*+?]?|\\[dDsSwW][*+?]?|\.[*+?]?", "0", regex)
    text = re.sub(r"\\(.)", r"\1", text)
    return re.sub(r"\(\?[:=!<]?|[()^$*+?|{}]", "", text)


def closest_lines(regex: str, lines: Mapping[str, Sequence[str]], count: int = CLOSEST
                  ) -> list[str]:
    """The `count` log lines (`{host: lines}`) most like what `regex` would match, each as
    `host: line` (a rank prefix left out, cut to `LINE_CHARS`; the runtime's lines skipped)."""
    seen: dict[str, str] = {}
    for host, found in lines.items():
        for line in found:
            if _RUNTIME.match(line):
                continue
            text = _RANK.sub("", line, count=1).strip()[:LINE_CHARS]
            if text:
                seen.setdefault(text, host)
    best = difflib.get_close_matches(regex_text(regex), list(seen), n=count, cutoff=0.0)
    return [f"{seen[text]}: {text}" for text in best]


def unmatched(trial: str, metric: str, regex: str, lines: Mapping[str, Sequence[str]]) -> str:
    """The line naming an objective metric that never matched the trial's log."""
    closest = closest_lines(regex, lines)
    shown = "; ".join(repr(line) for line in closest) if closest else "its log is empty"
    return (f"{trial}: the objective metric {metric!r} never matched its Regex {regex!r} in the "
            f"trial's log (so the trial has no objective); the closest lines: {shown}")


class Watch:
    """The checks of one tuning job, run by its controller: each finding logged once and kept
    in the tuning job's state. `jobs` holds the trials' training jobs."""

    def __init__(self, store: TuningStore, name: str, jobs: JobStore):
        self.store, self.name, self.jobs = store, name, jobs
        request = store.request(name)
        self.definition = request[parity.DEFINITION]
        self.metric = answers.objective(request)["MetricName"]
        self.regex = next((d["Regex"] for d in self.definition["AlgorithmSpecification"].get(
            "MetricDefinitions") or [] if d["Name"] == self.metric), None)
        self.flagged: set[str] = set()
        self.hosts: dict[str, tuple[str, ...]] = {}
        for line in store.state(name).diagnostics:  # what the client's tuner found lost
            log.warning("%s", line)
        self._keep(parity.request_warnings(request), {})

    def seen(self, trials: Iterable[Trial]) -> None:
        """Check the trials the controller has just seen: a running one's checkpoint folder
        (until a trial showed one), an ended one's metrics and log too."""
        for trial in trials:
            hosts = self._hosts(trial.name)
            if hosts is None:
                continue
            job_dir = self.jobs.job_dir(trial.name)
            found = self._checkpoints(trial.name, job_dir, hosts)
            diagnosis = None
            if trial.ended:
                records = metrics.series(job_dir)
                repeated = repeated_by(records, self.metric)
                if repeated and self._first("repeated"):
                    found.append(f"{trial.name}: the objective metric {self.metric!r} was "
                                 f"printed by {len(repeated)} hosts or ranks "
                                 f"({', '.join(repeated)}): SageMaker reads every copy as one "
                                 f"series, which misleads early stopping and Hyperband; print it "
                                 f"on one rank only (rank 0)")
                if trial.status == "Completed" and self.regex is not None and not any(
                        r.get("MetricName") == self.metric for r in records):
                    diagnosis = unmatched(trial.name, self.metric, self.regex,
                                          {host: log_tail(job_dir, host) for host in hosts})
                    if self._first("unmatched"):
                        log.warning("%s", diagnosis)
            self._keep(found, {trial.name: diagnosis} if diagnosis else {})

    def _hosts(self, trial: str) -> tuple[str, ...] | None:
        """The trial's hosts (None before its training job was admitted, or when refused)."""
        if trial not in self.hosts:
            try:
                self.hosts[trial] = self.jobs.job(trial).hosts
            except (OSError, ValueError, KeyError):
                return None
        return self.hosts[trial]

    def _checkpoints(self, trial: str, job_dir: Path, hosts: Sequence[str]) -> list[str]:
        """The line for the first trial seen writing checkpoints no CheckpointConfig keeps."""
        if "checkpoints" in self.flagged or "CheckpointConfig" in self.definition:
            return []
        writers = checkpoint_writers(job_dir, hosts)
        if not writers or not self._first("checkpoints"):
            return []
        return [f"{trial} wrote {CHECKPOINT_PATH} on {', '.join(writers)} while the definition "
                f"has no CheckpointConfig: {parity.consequence('CheckpointConfig')}"]

    def _first(self, finding: str) -> bool:
        """Whether `finding` is new to this tuning job (and from now on, not)."""
        new = finding not in self.flagged
        self.flagged.add(finding)
        return new

    def _keep(self, lines: list[str], diagnoses: dict[str, str]) -> None:
        for line in lines:
            log.warning("%s", line)
        if lines or diagnoses:
            self.store.update(self.name, lambda s: _record(s, lines, diagnoses))


def _record(state: TuningState, lines: list[str], diagnoses: dict[str, str]) -> bool:
    state.diagnostics += lines
    for trial in state.trials:
        if trial.name in diagnoses:
            trial.diagnosis = diagnoses[trial.name]
    return True
