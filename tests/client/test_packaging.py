"""sourcedir.tar.gz: same content -> same bytes; official layout; junk left out."""

from __future__ import annotations

import os
import tarfile
import time
from pathlib import Path

from ddpjob import packaging


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return tar.getnames()


def test_same_content_same_bytes(src: Path, tmp_path: Path) -> None:
    spec = packaging.check_source("train.py", src)
    first = packaging.pack(spec, tmp_path / "a.tar.gz")
    # new mtimes, a new permission bit pattern and junk must not change the bytes
    time.sleep(0.01)
    for path in src.iterdir():
        os.utime(path, (1, 1))
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"junk")
    (src / "stale.pyc").write_bytes(b"junk")
    second = packaging.pack(spec, tmp_path / "b.tar.gz")
    assert first == second
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    (src / "helper.py").write_text("VALUE = 2\n")
    assert packaging.pack(spec, tmp_path / "c.tar.gz") != first


def test_layout_and_normalised_members(src: Path, tmp_path: Path) -> None:
    lib = tmp_path / "mylib"
    (lib / "sub").mkdir(parents=True)
    (lib / "sub" / "m.py").write_text("x = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o700)
    spec = packaging.check_source("train.py", src, [lib])
    archive = tmp_path / packaging.ARCHIVE_NAME
    packaging.pack(spec, archive)
    assert _names(archive) == ["helper.py", "mylib", "mylib/sub", "mylib/sub/m.py", "run.sh",
                               "train.py"]
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == \
                (0, 0, 0, "", "")
        assert tar.getmember("run.sh").mode == 0o755
        assert tar.getmember("train.py").mode == 0o644
    assert archive.read_bytes()[4:8] == b"\0\0\0\0"  # gzip header time 0


def test_entry_point_without_source_dir(src: Path, tmp_path: Path) -> None:
    spec = packaging.check_source(str(src / "train.py"))
    assert spec.script_name == "train.py"
    archive = tmp_path / "x.tar.gz"
    packaging.pack(spec, archive)
    assert _names(archive) == ["train.py"]
