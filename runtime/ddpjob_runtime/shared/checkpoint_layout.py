"""The checkpoint layout, read and written here only (runtime `checkpoints`, client store).

Under a checkpoint folder (local, or the `checkpoint_s3_uri` treated as a folder)::

    step-000000100/state.pt        the user's state
    step-000000100/manifest.json   written last: {"step", "time", "files": {name: {size, sha256}}}

A checkpoint is complete when its manifest is there and every file it lists has the listed size.
A manifest is untrusted input: a file name that is not a plain relative path makes the whole
checkpoint unreadable (CheckpointError), and local paths are built through `fsutil.contained`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import fsutil
from ddpjob_runtime.shared.errors import StorageError, UnsafePathError

STATE = "state.pt"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"^step-(\d{9,})$")


class CheckpointError(StorageError):
    """A checkpoint exists but cannot be read; the message names its path."""


@dataclass(frozen=True)
class Manifest:
    """What a checkpoint holds: its step, when it was written, and each file's size and sha256."""

    step: int
    time: float = field(default_factory=time.time)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def is_complete(self, sizes: Mapping[str, int]) -> bool:
        """Whether every listed file is in `sizes` (name -> size) with its listed size."""
        return all(sizes.get(name) == meta["size"] for name, meta in self.files.items())


def step_dir_name(step: int) -> str:
    """The folder of checkpoint `step`: step-000000100."""
    return f"step-{step:09d}"


def step_of(name: str) -> int | None:
    """The step of a folder name like step-000000100, None for any other name."""
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def steps(names: Iterable[str]) -> list[int]:
    return sorted(step for name in set(names) if (step := step_of(name)) is not None)


def parse_manifest(data: bytes | str, where: str) -> Manifest:
    """The manifest in `data`; CheckpointError naming `where` when it is unreadable or unsafe."""
    try:
        raw = json.loads(data)
        files = {fsutil.relative_name(name, "checkpoint file"):
                 {"size": int(meta["size"]),
                  **({"sha256": str(meta["sha256"])} if meta.get("sha256") else {})}
                 for name, meta in raw["files"].items()}
        return Manifest(int(raw["step"]), float(raw.get("time", 0)), files)
    except UnsafePathError as exc:
        raise CheckpointError(f"{where}: unsafe checkpoint manifest ({exc})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{where}: unreadable checkpoint manifest ({exc})") from exc


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest of the local checkpoint `folder`, None when it has none."""
    path = folder / MANIFEST
    try:
        return parse_manifest(path.read_bytes(), str(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint manifest ({exc})") from exc


def file_path(folder: Path, name: str) -> Path:
    """Where the manifest's file `name` lives in the local `folder` (always inside it)."""
    try:
        return fsutil.contained(folder, name, what="checkpoint file")
    except UnsafePathError as exc:
        raise CheckpointError(f"{folder}: {exc}") from None


def local_complete(folder: Path) -> Manifest | None:
    """The manifest of the checkpoint in `folder` when it is complete, else None."""
    manifest = read_manifest(folder)
    if manifest is None:
        return None
    paths = {name: file_path(folder, name) for name in manifest.files}
    sizes = {name: path.stat().st_size for name, path in paths.items() if path.is_file()}
    return manifest if manifest.is_complete(sizes) else None


def corrupt_file(folder: Path, manifest: Manifest) -> Path | None:
    """The first file of `folder` whose size or sha256 differs from `manifest`, else None."""
    for name, meta in manifest.files.items():
        path = file_path(folder, name)
        if path.stat().st_size != meta["size"] or (
                meta.get("sha256") and fsutil.sha256_file(path) != meta["sha256"]):
            return path
    return None


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Write the manifest last, atomically and durably: the checkpoint is then complete."""
    fsutil.write_json(folder / MANIFEST, asdict(manifest), fsync=True)


def group_by_step(listing: Iterable[tuple[str, int]]) -> dict[int, dict[str, int]]:
    """`{step: {file name: size}}` from a listing of (key under the checkpoint folder, size)."""
    found: dict[int, dict[str, int]] = {}
    for key, size in listing:
        top, _, rest = key.partition("/")
        step = step_of(top)
        if step is not None and rest:
            found.setdefault(step, {})[rest] = size
    return dict(sorted(found.items()))
