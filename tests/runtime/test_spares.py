"""A warm pool's spare interpreters (`ddpjob_runtime.localkit.spares`), real ones: a worker's
request that finds no spare ready makes the pool grow, and waits for one that has been importing
for a while instead of starting an interpreter of its own (what a job that starts the moment the
last one ended meets: the spares its requests started are still importing torch)."""

from __future__ import annotations

import os
import selectors
import socket
import time
from pathlib import Path

from ddpjob_runtime.localkit.spares import NEARER_S, Spares
from ddpjob_runtime.shared import forkrun


def _serve_until(spares: Spares, selector: selectors.BaseSelector, client: socket.socket,
                 timeout_s: float = 120) -> bytes:
    """The template's loop for its spares until the client hears an answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            spares.heard(key.data[1])
        client.setblocking(False)
        try:
            return client.recv(1 << 16)
        except BlockingIOError:
            continue
        finally:
            client.setblocking(True)
    raise AssertionError("no answer from the spares")


def test_a_request_waits_for_a_spare_nearer_ready_than_a_new_interpreter(tmp_path: Path) -> None:
    selector = selectors.DefaultSelector()
    spares = Spares(str(tmp_path), dict(os.environ), selector)
    client, conn = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    output = tmp_path / "stdout"
    try:
        fresh = [os.open(os.devnull, os.O_RDONLY), os.open(output, os.O_WRONLY | os.O_CREAT),
                 os.open(os.devnull, os.O_WRONLY)]
        # A request the moment a spare starts: an interpreter of its own (no waiting among a
        # job's own workers); it found none ready, so two more start: one for the next
        # request, and one by which the pool grows (the next job finds its spares ready).
        spares.start()
        message = forkrun.request_message(["this"], dict(os.environ), str(tmp_path))
        assert not spares.hand_over(message, dict(os.environ), conn, fresh)
        assert len(spares.waiting) == 3
        time.sleep(NEARER_S)
        assert not spares.ready  # still importing torch
        assert spares.hand_over(message, dict(os.environ), conn, fresh)  # queued for it
        conn.close()
        for fd in fresh:  # the template's copies: the queue holds its own
            os.close(fd)
        answer = _serve_until(spares, selector, client)
        assert answer.startswith(b"R"), answer
        assert _serve_until(spares, selector, client) == b"X0"
        assert "Beautiful is better than ugly." in output.read_text()
    finally:
        spares.stop()
        client.close()
