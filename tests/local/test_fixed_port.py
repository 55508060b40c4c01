"""The containers' fixed rendezvous port: one job holds it, the next waits its turn, visibly.

The lock is a real `flock` on a file of a temporary folder; only the clock is a fake (a job may
not be pending less than SageMaker's minimum MaxPendingTimeInSeconds, 1,800 s).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from ddpjob.local.isolation import fixed_port
from ddpjob.local.isolation.fixed_port import PortLock, wait_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_second_job_waits_naming_the_first_and_takes_the_port_once_it_is_free(
        tmp_path: Path) -> None:
    first, second = PortLock("job-a", folder=tmp_path), PortLock("job-b", folder=tmp_path)
    assert first.try_take() is None
    said: list[str] = []
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 3:  # the first job ended
            first.release()

    waited = wait_for(second, None, lambda: False, said.append, clock, sleep)
    assert waited.taken and said == ["waiting for port 7777, held by job job-a"]
    assert first.try_take() == "job-b"  # now the second holds it, and says so
    second.release()
    assert first.try_take() is None


def test_pending_past_the_limit_or_a_stop_ends_the_wait(tmp_path: Path) -> None:
    holder = PortLock("job-a", folder=tmp_path)
    assert holder.try_take() is None
    clock = FakeClock()
    waited = wait_for(PortLock("job-b", folder=tmp_path), 1800, lambda: False, lambda _: None,
                      clock, clock.sleep)
    assert not waited.taken and not waited.stopped and waited.pending_s >= 1800
    stopped = wait_for(PortLock("job-c", folder=tmp_path), None, lambda: True, lambda _: None,
                       clock, clock.sleep)
    assert stopped.stopped and not stopped.taken


def test_a_lock_whose_holder_died_is_free(tmp_path: Path) -> None:
    """flock ends with its holder's descriptor: a killed supervisor blocks nobody."""
    code = (f"import sys; sys.path[:0] = {sys.path!r}\n"
            f"from pathlib import Path\nfrom ddpjob.local.isolation.fixed_port import PortLock\n"
            f"assert PortLock('dead', folder=Path({str(tmp_path)!r})).try_take() is None\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert PortLock("alive", folder=tmp_path).try_take() is None


def test_the_holder_of_a_port_is_named() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not fixed_port.port_free(port)
        assert fixed_port.holder(port).startswith(f"pid {os.getpid()} (")
