"""Which failed host's `output/failure` is the job's cause (a pure choice, tested alone).

When one rank raises, the ranks of the other hosts fail too, a moment later, in a collective
("Connection closed by peer") or by our SIGTERM ("stopped by SIGTERM"). Their hosts may even
write their failure first, so the choice prefers a user's exception that names a rank over such
fallout, then the earliest written, then the host seen failing first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What a rank reports when another rank's death broke the collective it waited in.
_FALLOUT = re.compile(
    r"gloo|nccl|connection (closed|reset)|broken pipe|DistBackendError|DistNetworkError|"
    r"DistStoreError|stopped by SIG",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HostFailure:
    """One failed host's `output/failure` text and when it was written (epoch seconds)."""

    host: str
    text: str
    written: float
    seen_first: bool = False  # the supervisor saw this host exit non-zero first


def _headline(text: str) -> str:
    return text.strip().split("\n", 1)[0]


def is_fallout(text: str) -> bool:
    """Whether the failure reads like the consequence of another rank's failure."""
    return bool(_FALLOUT.search(_headline(text)))


def choose(failures: list[HostFailure]) -> HostFailure | None:
    """The most likely cause among the failed hosts' failures (None when there are none)."""
    def rank(f: HostFailure) -> tuple:
        names_rank = ", rank " in _headline(f.text)
        return (not names_rank, is_fallout(f.text), f.written, not f.seen_first)

    return min(failures, key=rank, default=None)
