"""Async handles for collectives that need more than one torch call (post-division, p2p)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

import torch.distributed as tdist


class Work:
    """What ``async_op=True`` returns: ``wait()`` and ``is_completed()``, like torch's Work.

    Wraps one or more torch works and a ``then`` step (e.g. dividing a SUM into an
    AVERAGE) that runs exactly once, as soon as the caller learns the works are done.
    """

    def __init__(self, works: Sequence[tdist.Work], then: Callable[[], None] | None = None):
        self._works = list(works)
        self._then = then
        self._done = False
        self._lock = threading.Lock()

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the collective finished and its result is in place; returns True."""
        for work in self._works:
            if timeout is None:
                work.wait()
            else:
                work.wait(timeout)
        self._finish()
        return True

    def is_completed(self) -> bool:
        """True once the result is in place (the ``then`` step included); never blocks long."""
        if self._done:
            return True
        if all(work.is_completed() for work in self._works):
            # wait() on a finished work returns at once, and raises if it failed.
            return self.wait()
        return False

    def _finish(self) -> None:
        with self._lock:
            if not self._done:
                if self._then is not None:
                    self._then()
                self._done = True
