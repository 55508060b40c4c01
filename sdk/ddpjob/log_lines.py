"""How a line of a job's log is shown: with its host, and with its rank when a worker wrote it."""

from __future__ import annotations

import re

from ddpjob_runtime.shared.contract import RANK_LINE_REGEX

_RANK_LINE = re.compile(RANK_LINE_REGEX)


def shown(host: str, line: str) -> str:
    """`[algo-1] line`, or `[algo-2 rank 3] line` for the line `[rank 3] line` that a worker
    wrote (the runtime prefixes each), as `ddpjob stacks` heads that rank's stacks."""
    found = _RANK_LINE.match(line)
    if found is None:
        return f"[{host}] {line}"
    return f"[{host} rank {found[1]}] {line[found.end():]}"
