"""The log tail of local jobs: whole lines per host, as files grow and appear."""

from __future__ import annotations

from pathlib import Path

from ddpjob.local.watch import logtail


def test_log_tail_yields_whole_lines_per_host_and_the_rest_at_the_end(tmp_path: Path) -> None:
    a, b = tmp_path / "algo-1.log", tmp_path / "algo-2.log"
    a.write_bytes(b"one\ntw")
    done = iter([False, True])
    tail = logtail.follow({"algo-1": a, "algo-2": b}, lambda: next(done), poll_s=0.01)
    assert next(tail) == ("algo-1", "one")
    with open(a, "ab") as f:
        f.write(b"o\nthree")  # "three" is never terminated
    b.write_bytes(b"late\r\n")  # a file that appears after the tail began
    rest = list(tail)  # ends: the second is_done() says True, then the rest is drained
    assert [line for host, line in rest if host == "algo-1"] == ["two", "three"]
    assert [line for host, line in rest if host == "algo-2"] == ["late"]
    snapshot = list(logtail.follow({"algo-1": a}, lambda: False, follow=False))
    assert snapshot == [("algo-1", "one"), ("algo-1", "two"), ("algo-1", "three")]
