"""What kind of entry point the user gave, decided like the toolkit's `_entry_point_type`."""

from __future__ import annotations

import enum
import os
from pathlib import Path

from ddpjob_runtime.shared.errors import RuntimeContractError


class EntryKind(enum.Enum):
    PYTHON_SCRIPT = "python script"
    PYTHON_MODULE = "python module"  # code/ is a package (has setup.py): run with -m
    COMMAND = "command"  # a shell script or any other executable


def entry_kind(code_dir: Path, name: str) -> EntryKind:
    """The toolkit's rule: `.sh` is a command, a `setup.py` makes a package, `.py` a script."""
    if name.endswith(".sh"):
        return EntryKind.COMMAND
    if (code_dir / "setup.py").exists():
        return EntryKind.PYTHON_MODULE
    if name.endswith(".py"):
        return EntryKind.PYTHON_SCRIPT
    return EntryKind.COMMAND


def check_entry_point(code_dir: Path, name: str) -> EntryKind:
    """Refuse an entry point outside code/, an option-like name, or one that is not there."""
    if name.startswith("-"):
        raise RuntimeContractError(f"entry point {name!r} must not start with '-'")
    code = os.path.realpath(code_dir)
    target = os.path.realpath(os.path.join(code, name))
    if os.path.commonpath([code, target]) != code:
        raise RuntimeContractError(f"entry point {name!r} resolves outside the source directory")
    kind = entry_kind(code_dir, name)
    if kind is EntryKind.PYTHON_MODULE:
        return kind  # importable from an installed package or code/; the worker reports failures
    if not os.path.isfile(target):
        present = sorted(p.name for p in code_dir.iterdir())[:20] if code_dir.is_dir() else []
        raise RuntimeContractError(
            f"entry point {name!r} not found in the source directory (it holds: "
            f"{', '.join(present) or 'nothing'})"
        )
    return kind
