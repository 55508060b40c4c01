"""Reports the home this host's script sees (HOME, `~`, whether a requirement's build wrote
there, whether torch was imported before it ran: forked from the job's template), writes `~/x`,
then tries to write beside the local bucket's folder and writes into the folder itself."""

import json
import os
import sys
from pathlib import Path

home = Path.home()
(home / "x").write_text("written by the job")
print("home: " + json.dumps({
    "HOME": os.environ.get("HOME"), "expanded": os.path.expanduser("~"),
    "built": (home / "built-by-requirements").is_file(), "x": (home / "x").read_text(),
    "forked": "torch" in sys.modules,
}), flush=True)
bucket = Path(os.environ["DDPJOB_LOCAL_BUCKET"])
try:
    (bucket.parent / ".escaped").mkdir(exist_ok=True)
    (bucket.parent / ".escaped" / "planted").write_text("planted")
    print("beside the bucket: written", flush=True)
except OSError as exc:
    print(f"beside the bucket: refused {type(exc).__name__} (errno {exc.errno})", flush=True)
(bucket / "from-the-job").write_text("algo-1")
