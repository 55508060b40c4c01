"""Stand-ins for libraries only SageMaker's containers have, on a local host's workers' path.

The local backend names a folder of them in platform.json (`stand_ins`: the local kit's
`smdistributed`); SageMaker names none, so its hosts never get it. The folder goes last on the
workers' `PYTHONPATH`, and only when this Python cannot import what it stands in for: an
installed library, or one the job's `requirements.txt` installs (first on the path), wins.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def packages(folder: Path) -> list[str]:
    """The top-level packages `folder` holds, by name."""
    return sorted(entry.name for entry in folder.iterdir() if (entry / "__init__.py").is_file())


def worker_path(folder: str | None, pythonpath: str | None) -> str | None:
    """The workers' `PYTHONPATH`: `pythonpath` with `folder` last when this Python can import
    none of its packages, else `pythonpath` unchanged (also without a folder)."""
    if not folder:
        return pythonpath
    names = packages(Path(folder))
    installed = [name for name in names if importlib.util.find_spec(name) is not None]
    if not names or installed:
        return pythonpath
    log.debug("%s is not installed: the workers get ddpjob's stand-in", ", ".join(names))
    return os.pathsep.join(p for p in (pythonpath, folder) if p)
