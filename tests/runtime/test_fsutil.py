"""The shared small helpers: containment of untrusted names, atomic private writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from ddpjob_runtime.shared import fsutil
from ddpjob_runtime.shared.errors import UnsafePathError


@pytest.mark.parametrize("name", ["/tmp/x", "../../x", "a/../../x", "..", ".", "", "a\x00b",
                                  "\\\\server\\x", 3])
def test_contained_refuses_names_that_escape(tmp_path: Path, name: object) -> None:
    with pytest.raises(UnsafePathError, match="refused") as info:
        fsutil.contained(tmp_path, name, what="checkpoint file")
    assert "\n" not in str(info.value) and "checkpoint file" in str(info.value)


def test_contained_refuses_links_out_and_keeps_names_inside(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "sub").mkdir(parents=True)
    (base / "out").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="resolves outside"):
        fsutil.contained(base, "out/x")
    assert fsutil.contained(base, "sub/./x.pt") == base / "sub" / "x.pt"


def test_atomic_writes_are_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.json"
    fsutil.write_json(path, {"a": 1}, mode=0o600, fsync=True)
    assert path.read_text() == '{"a": 1}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(RuntimeError), fsutil.atomic_open(path) as handle:
        handle.write(b"half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == '{"a": 1}'  # the old file, and no temp file left
    assert os.listdir(path.parent) == ["state.json"]
    fsutil.write_text(path, "new")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_text() == "new"
    previous = os.umask(0o077)  # a local job's supervisor and hosts: private files only
    try:
        fsutil.copy_file(path, path.with_name("copy"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.with_name("copy").stat().st_mode) == 0o600
    assert fsutil.sha256_file(path) == \
        "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437"
