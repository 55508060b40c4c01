"""The lines a killed host's workers printed that its log never got.

A worker's lines reach its host's log through torchrun's `--tee`: the host's agent tails each
worker's files (`<tmp>/torchelastic_*/<run>_*/attempt_<n>/<local rank>/{stdout,stderr}.log`)
every 0.1 s and appends `[rank R] line`. A host that is killed takes its agent along, and with
it what the tail had not copied yet (a line printed a moment before, more under load). The
files stay in the host's root until the supervisor removes it: `recover` appends to the log
each rank's lines beyond those it already holds (the tail copies a rank's lines in order, so
the log holds a first part of them; a worker writes its stderr into its stdout's file once it
starts, `ddpjob_runtime.job.worker`, so the stderr file's few early lines count as copied).

The files are the ranks' (untrusted): no link is followed, no FIFO opened, and at most
`MAX_BYTES` of each file and of the log read.
"""

from __future__ import annotations

import io
import logging
import os
import stat
import string
from pathlib import Path

from ddpjob_runtime.shared import contract

log = logging.getLogger("ddpjob.local.run.supervisor")

MAX_BYTES = 16 << 20


def _read(path: Path, limit: int = MAX_BYTES, offset: int = 0) -> bytes:
    """Up to `limit` bytes of the regular file `path` from `offset` (b"" for anything else)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        os.lseek(fd, offset, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _lines(data: bytes) -> list[str]:
    """`data` split as torchrun's tail reads it (text, universal newlines, bad bytes replaced)."""
    return io.StringIO(data.decode(errors="replace"), newline=None).readlines()


def _folders(path: Path) -> list[Path]:
    """The folders in `path` (never through a link)."""
    try:
        with os.scandir(path) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _attempts(tmp: Path) -> list[Path]:
    """The attempt folders torchrun made below the host's `tmp`, in the order of their runs."""
    found = [attempt for base in _folders(tmp) if base.name.startswith("torchelastic_")
             for run in _folders(base) for attempt in _folders(run)
             if attempt.name.removeprefix("attempt_").isdigit()]
    return sorted(found, key=lambda a: int(a.name.removeprefix("attempt_")))


def _rank_files(tmp: Path, host_index: int) -> dict[int, tuple[list[str], int]]:
    """Global rank -> (its stdout lines over every attempt, how many stderr lines it had)."""
    ranks: dict[int, tuple[list[str], int]] = {}
    for attempt in _attempts(tmp):
        local = sorted(int(f.name) for f in _folders(attempt) if f.name.isdigit())
        for local_rank in local:  # torchrun's static ranks: node rank x workers + local rank
            rank = host_index * len(local) + local_rank
            out, err = ranks.get(rank, ([], 0))
            folder = attempt / str(local_rank)
            ranks[rank] = (out + _lines(_read(folder / "stdout.log")),
                           err + len(_lines(_read(folder / "stderr.log"))))
    return ranks


def recover(tmp: Path, host_log: Path, log_start: int, host_index: int) -> int:
    """Append to `host_log` the lines of the workers below `tmp` (the host's TMPDIR; the host
    is the `host_index`-th of its job) that the log, from `log_start` on, lacks; how many."""
    ranks = _rank_files(tmp, host_index)
    if not ranks:
        return 0
    logged_bytes = _read(host_log, offset=log_start)
    if len(logged_bytes) >= MAX_BYTES:  # what it holds is beyond our count: add nothing
        return 0
    logged = logged_bytes.decode(errors="replace").split("\n")
    missing = []
    for rank, (out, err) in sorted(ranks.items()):
        prefix = string.Template(contract.RANK_LINE_PREFIX).substitute(rank=rank)  # as torchrun
        copied = sum(line.startswith(prefix) for line in logged)
        missing += [prefix + line.rstrip("\n") + "\n" for line in out[max(0, copied - err):]]
    if missing:
        with open(host_log, "a") as out_file:
            out_file.writelines(missing)
        log.warning("%s: %d lines its workers printed that the log lacked (its agent ended "
                    "before it copied them)", host_log.stem, len(missing))
    return len(missing)
