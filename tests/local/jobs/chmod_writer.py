"""Makes its staged `train/a.txt` writable and overwrites it with as many other bytes, as a
hostile or careless rank would (the same size: a cache that trusts sizes is fooled); records
in `<SM_OUTPUT_DATA_DIR>/chmod.txt` what happened (a read-only mount refuses it)."""

import os
from pathlib import Path

target = Path(os.environ["SM_CHANNEL_TRAIN"]) / "a.txt"
try:
    os.chmod(target, 0o644)
    target.write_bytes(b"X" * target.stat().st_size)
    outcome = "written"
except OSError as exc:
    outcome = f"refused: {exc.strerror}"
(Path(os.environ["SM_OUTPUT_DATA_DIR"]) / "chmod.txt").write_text(outcome)
print(f"chmod write: {outcome}", flush=True)
