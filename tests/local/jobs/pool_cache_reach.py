"""Lists and writes this host's own warm-pool cache (if it has one), then, with `--target`,
tries to reach another pool's cache by its real path: list it, read its `from-algo-1`, write a
file into it, and list the pools' folder above it; prints what each try got."""

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--tag", required=True)
parser.add_argument("--target", default="")
args = parser.parse_args()


def attempt(action: Callable[[], object]) -> str:
    try:
        return f"ok {action()!r}"
    except OSError as exc:
        return f"refused {type(exc).__name__}"


if os.environ.get("SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"):
    own = Path(os.environ["SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"])
    found = {p.name: p.read_text() for p in sorted(own.iterdir())}
    print(f"own cache: {json.dumps(found, sort_keys=True)}", flush=True)
    (own / "from-algo-1").write_text(args.tag)
if args.target:
    target = Path(args.target)
    tries = {
        "list": attempt(lambda: sorted(os.listdir(target))),
        "read": attempt(lambda: (target / "from-algo-1").read_text()),
        "write": attempt(lambda: (target / f"from-{args.tag}").write_text(args.tag)),
        "pools": attempt(lambda: sorted(os.listdir(target.parents[2]))),
    }
    print(f"tries: {json.dumps(tries, sort_keys=True)}", flush=True)
