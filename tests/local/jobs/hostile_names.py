"""Torch-free: reports which of `NAMES` its checkpoint folder held at start and every path in
it (one JSON line each), then writes each of `NAMES` there and a model file: legal file names
and S3 keys that look like URL escapes, paths or temp files, one with a NUL escape, one with a
newline, one of 246 characters."""

import json
import os
from pathlib import Path

NAMES = ["%2E%2E%2Frun-2%2Fmodel.pt", "a%2Fb.txt", "%00nul.txt", "new\nline.txt", "x" * 246,
         ".notes.abcd1234.tmp"]

folder = Path(os.environ["DDPJOB_CHECKPOINT_DIR"])
found = sorted(name for name in NAMES if (folder / name).is_file())
print(f"found at start: {json.dumps(found)}", flush=True)
held = sorted(os.path.relpath(os.path.join(top, name), folder)
              for top, dirs, names in os.walk(folder) for name in names)
print(f"held at start: {json.dumps(held)}", flush=True)
for name in NAMES:
    (folder / name).write_text(f"bytes of {name!r}")
(Path(os.environ["SM_MODEL_DIR"]) / "model.txt").write_text("the model")
