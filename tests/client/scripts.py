"""Run this folder's scripts (the image URI oracle, the SDK probe) in any venv on this checkout.

The main venv (v2) and tests/sdk3's venv (v3) run the same scripts with their own Python.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).parents[2]
ORACLE = Path(__file__).with_name("image_uri_oracle.py")
PROBE = Path(__file__).with_name("sdk_probe.py")


def run_script(python: str | Path, script: Path) -> dict[str, Any]:
    """Run `script` with `python` on this checkout's ddpjob; the JSON of its last line."""
    path = os.pathsep.join(str(REPO / part) for part in ("sdk", "runtime"))
    done = subprocess.run([str(python), str(script)], capture_output=True, text=True,
                          timeout=240, check=False, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
