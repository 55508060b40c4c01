"""A Python environment of a local host's own, over the interpreter it runs.

SageMaker runs every job in a fresh container: what a job's `requirements.txt` (or its script's
`pip install`) adds is gone with it. A local host runs this machine's interpreter, so it gets a
virtual environment of its own under the job's folder instead: made without pip (about 50 ms)
and seeing every package of the interpreter it is made over (a venv's too), so nothing is
copied, pip there skips what is already installed, and what the job installs lands in the
host's environment, never in the user's. Torch-free; used by the runtime and the local backend.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PTH_FILE = "_ddpjob_base_python.pth"


def site_packages(prefix: Path) -> list[Path]:
    return sorted(prefix.glob("lib/python*/site-packages"))


def create(folder: Path, python: str) -> Path:
    """A venv at `folder` over the interpreter `python`; its own interpreter's path."""
    subprocess.run([python, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(folder)], check=True, capture_output=True, timeout=120)
    base = Path(python).parent.parent
    if (base / "pyvenv.cfg").exists():  # a venv's packages are not its base's: add them
        lines = [f"import site; site.addsitedir({str(p)!r})" for p in site_packages(base)]
        for own in site_packages(folder):
            (own / PTH_FILE).write_text("\n".join(lines) + "\n")
    return folder / "bin" / "python"
