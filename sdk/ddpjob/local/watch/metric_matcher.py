"""MetricDefinitions matched against log lines without ever stalling the local supervisor.

A `Regex` with nested quantifiers (`(a+)+$`) can backtrack for longer than the job runs, and
Python's `re` holds the GIL while it does: matched in the supervisor, it would stop the job's
control (the job stays InProgress, `stop()` never ends). So a Regex is compiled with RE2 (the
`google-re2` package: linear time, nothing to bound) where that is installed and the pattern is
RE2's syntax; every other one is matched by `re` in a child process that the supervisor
watches. When one line has kept a definition busy for `MATCH_TIMEOUT_S`, the child is killed,
that definition is disabled for the rest of the job with a warning naming it, and the other
definitions go on in a new child. The child dies with the supervisor.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import signal
import time
from collections.abc import Sequence
from typing import Any

from ddpjob_runtime.shared import processes

log = logging.getLogger(__name__)

MATCH_TIMEOUT_S = 2.0  # one definition on one line, in the child
START_TIMEOUT_S = 120.0  # for the child to import and compile (a loaded machine is slow)
_TICK_S = 0.05

try:  # the linear-time engine, where installed (the `re2` extra)
    import re2
except ImportError:
    re2 = None


def _linear(regex: str) -> Any | None:
    """`regex` compiled by RE2, or None (RE2 not installed, or a pattern it does not take,
    e.g. a backreference or a lookaround)."""
    if re2 is None:
        return None
    options = re2.Options()
    options.log_errors = False  # a pattern RE2 refuses is simply matched by `re`
    try:
        return re2.compile(regex, options)
    except re2.error:
        return None


def _serve(conn: Any, regexes: list[str], progress: Any) -> None:
    """The child: match each batch of lines it receives; `progress` = [matches started,
    definition being matched], for the parent to see which one is stuck."""
    processes.die_with_parent(signal.SIGKILL)
    patterns = [re.compile(r) for r in regexes]
    conn.send("ready")
    while True:
        try:
            lines = conn.recv()
        except EOFError:  # the parent closed its end
            return
        found = []
        for i, line in enumerate(lines):
            for j, pattern in enumerate(patterns):
                progress[1] = j
                progress[0] += 1
                match = pattern.search(line)
                if match:
                    found.append((i, j, match.group(1)))
        conn.send(found)


class _Child:
    """The matching child of the definitions `regexes`."""

    def __init__(self, regexes: list[str]):
        context = multiprocessing.get_context("spawn")  # nothing of the parent's state
        self.progress = context.Array("q", 2, lock=False)
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, regexes, self.progress),
                                       name="ddpjob-metric-matcher", daemon=True)
        self.process.start()
        theirs.close()
        if not self.conn.poll(START_TIMEOUT_S) or self.conn.recv() != "ready":
            self.close()
            raise RuntimeError(f"the metric matcher did not start within {START_TIMEOUT_S} s")

    def match(self, lines: list[str]) -> list[tuple[int, int, str]] | int:
        """`(line, definition, first group)` of every match; or the index of the definition
        that stalled (or whose child died) on a line."""
        try:
            self.conn.send(lines)
        except OSError:  # it died meanwhile (killed from outside)
            return self.progress[1]
        seen, since = self.progress[0], time.monotonic()
        while not self.conn.poll(_TICK_S):
            if not self.process.is_alive():
                return self.progress[1]
            if self.progress[0] != seen:
                seen, since = self.progress[0], time.monotonic()
            elif time.monotonic() - since > MATCH_TIMEOUT_S:
                return self.progress[1]
        try:
            return self.conn.recv()
        except EOFError:  # died just after its last progress
            return self.progress[1]

    def close(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.join()


class Matcher:
    """Every definition `(Name, Regex)`, matched in bounded time per line."""

    def __init__(self, definitions: Sequence[tuple[str, str]]):
        self.names = [name for name, _ in definitions]
        self.regexes = [regex for _, regex in definitions]
        self._linear = {i: p for i, (_, r) in enumerate(definitions)
                        if (p := _linear(r)) is not None}
        self._watched = [i for i in range(len(definitions)) if i not in self._linear]
        self._child: _Child | None = None

    def search(self, lines: list[str]) -> list[tuple[int, str, str]]:
        """`(line index, Name, first group)` of every match, in line then definition order."""
        found = [(i, j, m.group(1)) for i, line in enumerate(lines)
                 for j, pattern in self._linear.items() if (m := pattern.search(line))]
        found += self._search_watched(lines)
        return [(i, self.names[j], text) for i, j, text in sorted(found)]

    def _search_watched(self, lines: list[str]) -> list[tuple[int, int, str]]:
        while self._watched and lines:
            if self._child is None:
                try:
                    self._child = _Child([self.regexes[j] for j in self._watched])
                except (OSError, RuntimeError) as exc:
                    log.warning("metric definitions %s disabled: %s",
                                [self.names[j] for j in self._watched], exc)
                    self._watched.clear()
                    return []
            result = self._child.match(lines)
            if not isinstance(result, int):
                return [(i, self._watched[k], text) for i, k, text in result]
            self._disable(self._watched[result])
        return []

    def _disable(self, j: int) -> None:
        hint = ("install google-re2 (pip install 'ddpjob[re2]') to match in linear time"
                if re2 is None else "RE2 does not take this pattern: rewrite it in RE2 syntax")
        log.warning("metric definition %r disabled for the rest of the job: its Regex %r took "
                    "over %.0f s on one log line (nested quantifiers?); %s",
                    self.names[j], self.regexes[j], MATCH_TIMEOUT_S, hint)
        self._watched.remove(j)
        self.close()

    def close(self) -> None:
        """End the child, if any (a later search starts a new one)."""
        if self._child is not None:
            self._child.close()
            self._child = None
