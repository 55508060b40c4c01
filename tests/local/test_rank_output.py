"""`rank_output.recover` on torchrun's files as a killed host left them: the lines the host's
log lacks, once each, rank by rank; the ranks' links and FIFOs neither followed nor opened."""

from __future__ import annotations

import os
from pathlib import Path

from ddpjob.local.watch import rank_output


def _worker_files(tmp: Path, attempt: int, local_rank: int, out: str, err: str = "") -> Path:
    folder = tmp / "torchelastic_x" / "run_y" / f"attempt_{attempt}" / str(local_rank)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.log").write_text(out)
    (folder / "stderr.log").write_text(err)
    return folder


def test_only_the_lines_the_log_lacks_are_added_after_what_it_had(tmp_path: Path) -> None:
    """Host 2 of its job (ranks 2 and 3): the log before this host started is not counted,
    a rank's stderr lines count as copied, and its attempts' lines follow one another."""
    tmp, log = tmp_path / "tmp", tmp_path / "algo-2.log"
    _worker_files(tmp, 0, 0, "a\nb\n", err="early\n")
    _worker_files(tmp, 0, 1, "x\n")
    _worker_files(tmp, 1, 0, "c\nd")
    _worker_files(tmp, 1, 1, "y\n")
    earlier = "[rank 2] a\n[rank 2] b\n[rank 3] x\n"  # an earlier start of this host
    log.write_text(earlier + "[rank 2] early\n[rank 2] a\n[rank 3] x\nINFO host\n[rank 2] b\n")

    assert rank_output.recover(tmp, log, len(earlier), host_index=1) == 3
    assert log.read_text().splitlines()[-3:] == ["[rank 2] c", "[rank 2] d", "[rank 3] y"]
    assert rank_output.recover(tmp, log, len(earlier), host_index=1) == 0  # nothing twice


def test_links_and_fifos_of_the_ranks_are_not_read(tmp_path: Path) -> None:
    tmp, log = tmp_path / "tmp", tmp_path / "algo-1.log"
    secret = tmp_path / "secret"
    secret.write_text("not the rank's\n")
    folder = _worker_files(tmp, 0, 0, "")
    (folder / "stdout.log").unlink()
    (folder / "stdout.log").symlink_to(secret)
    fifo_folder = _worker_files(tmp, 0, 1, "")
    (fifo_folder / "stdout.log").unlink()
    os.mkfifo(fifo_folder / "stdout.log")
    linked = tmp / "torchelastic_x" / "run_y" / "attempt_1"
    linked.symlink_to(secret.parent)
    log.write_text("")

    assert rank_output.recover(tmp, log, 0, host_index=0) == 0
    assert log.read_text() == ""
