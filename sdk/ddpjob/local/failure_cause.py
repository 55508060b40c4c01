"""Which failed host caused a job's failure, and the FailureReason that says so (pure).

When one rank dies, the ranks of the other hosts fail too, a moment later, in a collective
("Connection closed by peer") or by our SIGTERM ("stopped by SIGTERM"); a host whose
`ddpjob-train` was killed writes nothing at all. Each host's runtime writes `output/failure` and
`output/failure.json` (when the failure happened, whether it is a consequence). The cause is the
earliest failure that is not a consequence; the others are listed as its consequences.
"""

from __future__ import annotations

import contextlib
import json
import signal
from dataclasses import dataclass
from pathlib import Path

from ddpjob_runtime.failure import TIME_FILE, is_consequence

_CONSEQUENCE_CHARS = 160


@dataclass(frozen=True)
class HostFailure:
    """One failed host's failure text, when it happened (epoch s), and whether it is fallout."""

    host: str
    text: str
    written: float
    seen_first: bool = False  # the supervisor saw this host exit non-zero first
    consequence: bool | None = None  # None: judged from the text

    @property
    def is_consequence(self) -> bool:
        return is_consequence(self.text) if self.consequence is None else self.consequence


def _headline(text: str) -> str:
    return text.strip().split("\n", 1)[0]


def choose(failures: list[HostFailure]) -> HostFailure | None:
    """The cause among the failed hosts' failures (None when there are none)."""
    return min(
        failures, key=lambda f: (f.is_consequence, f.written, not f.seen_first), default=None
    )


def read_host(host: str, output_dir: Path, exit_code: int, exited_at: float) -> HostFailure:
    """Host `host`'s failure from its `output/` folder; a killed host wrote none: say so."""
    path = output_dir / "failure"
    try:
        text = path.read_text()
    except OSError:
        how = (
            f"was killed by {signal.Signals(-exit_code).name}"
            if exit_code < 0
            else f"exited with code {exit_code} without a failure file"
        )
        return HostFailure(host, f"host {host}: ddpjob-train {how}", exited_at, consequence=False)
    info: dict = {}
    with contextlib.suppress(OSError, ValueError):
        info = json.loads((output_dir / TIME_FILE).read_text())
    when = info.get("time") if isinstance(info.get("time"), (int, float)) else None
    consequence = info.get("consequence") if isinstance(info.get("consequence"), bool) else None
    return HostFailure(host, text, when or path.stat().st_mtime, consequence=consequence)


def reason(failures: list[HostFailure], limit: int) -> str | None:
    """`AlgorithmError: <the cause>`, then its consequences, in at most `limit` characters."""
    cause = choose(failures)
    if cause is None:
        return None
    headline, _, details = cause.text.strip().partition("\n")
    others = sorted((f for f in failures if f is not cause), key=lambda f: f.written)
    lines = [f"AlgorithmError: {headline}"]
    if others:
        lines.append("consequences (later):")
        lines += [f"- {_headline(f.text)[:_CONSEQUENCE_CHARS]}" for f in others]
    text = "\n".join(lines) + (f"\n\n{details.strip()}" if details.strip() else "")
    return text[:limit]
