"""Lists what this host finds in SageMaker's warm-pool cache, then leaves a file there.

`--path hard` writes through the path scripts hard-code (`/opt/ml/sagemaker/warmpoolcache`),
`--path env` through `SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY`; no variable: no cache.
"""

import argparse
import json
import os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--path", default="hard")
parser.add_argument("--tag", required=True)
args = parser.parse_args()

root = Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"))
host = json.loads((root / "input/config/resourceconfig.json").read_text())["current_host"]
variable = os.environ.get("SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY")
print(f"{host} cache variable: {variable}", flush=True)
if variable is not None:
    cache = Path("/opt/ml/sagemaker/warmpoolcache" if args.path == "hard" else variable)
    found = {p.name: p.read_text() for p in sorted(cache.iterdir())}
    print(f"{host} cache found: {json.dumps(found, sort_keys=True)}", flush=True)
    (cache / f"from-{host}").write_text(args.tag)
