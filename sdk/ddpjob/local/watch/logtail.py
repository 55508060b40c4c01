"""Follow the per-host log files of a local job, yielding `(host, line)` as lines arrive."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

POLL_S = 0.2
FIRST_POLL_S = 0.02  # after a line: a job's end often follows its last lines closely


class Tail:
    """The unread part of one growing file (which may not exist yet)."""

    def __init__(self, path: Path):
        self.path = path
        self.file: BinaryIO | None = None
        self.partial = b""

    def lines(self, final: bool) -> list[str]:
        """Complete lines written since the last call; with `final`, the unterminated rest too."""
        if self.file is None:
            try:
                self.file = open(self.path, "rb")  # noqa: SIM115 - kept open across calls
            except FileNotFoundError:
                return []
        data = self.partial + self.file.read()
        *complete, self.partial = data.split(b"\n")
        if final and self.partial:
            complete.append(self.partial)
            self.partial = b""
        return [line.decode(errors="replace").rstrip("\r") for line in complete]

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def follow(
    paths: Mapping[str, Path], is_done: Callable[[], bool], follow: bool = True,
    poll_s: float = POLL_S,
) -> Iterator[tuple[str, str]]:  # fmt: skip
    """Yield `(host, line)` from each host's log file.

    Without `follow`, what is there now; with it, keep polling until `is_done()` says the writers
    have ended, then drain what is left. The poll starts at `FIRST_POLL_S` after each line and
    doubles up to `poll_s` while nothing comes.
    """
    tails = {host: Tail(path) for host, path in paths.items()}
    wait_s = min(FIRST_POLL_S, poll_s)
    try:
        while True:
            done = not follow or is_done()  # asked before reading: nothing is written after
            got = False
            for host, tail in tails.items():
                for line in tail.lines(final=done):
                    got = True
                    yield host, line
            if done:
                return
            if got:
                wait_s = min(FIRST_POLL_S, poll_s)
            else:
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, poll_s)
    finally:
        for tail in tails.values():
            tail.close()
