"""A SageMaker-style script: plain torch.distributed and the container's hard-coded paths.

It reads `/opt/ml/input/data/training`, resolves `algo-1` and `algo-2`, and on the last rank of
two tries to `chmod` a channel file writable and write it (recording what happened); after a
barrier it reads the channel again. Rank 0 writes `/opt/ml/checkpoints/state.pt` and
`/opt/ml/model/model.pt`. Every rank writes what it saw to `/opt/ml/output/data/report.json`.
"""

import errno
import hashlib
import json
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
from group_teardown import finish

CHANNEL = Path("/opt/ml/input/data/training")
VARIABLES = ("SM_CURRENT_HOST", "SM_HOSTS", "SM_MODEL_DIR", "SM_CHANNEL_TRAINING",
             "SM_OUTPUT_DATA_DIR", "SAGEMAKER_BASE_DIR")


def view() -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(CHANNEL.iterdir()) if p.is_file()}


def chmod_and_write(path: Path) -> str:
    try:
        os.chmod(path, 0o644)
        with open(path, "w") as f:
            f.write("changed by a rank")
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "written"


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
config = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
report = {
    "host": config["current_host"], "rank": rank, "before": view(),
    "resolved": {h: socket.gethostbyname(h) for h in config["hosts"]},
    "variables": {name: os.environ.get(name) for name in VARIABLES},
}
dist.barrier()
if world > 1 and rank == world - 1:
    report["chmod and write"] = chmod_and_write(CHANNEL / "a.txt")
dist.barrier()
report["after"] = view()
if rank == 0:
    torch.save({"step": 7}, "/opt/ml/checkpoints/state.pt")
    torch.save({"w": torch.arange(3.0)}, "/opt/ml/model/model.pt")
Path("/opt/ml/output/data/report.json").write_text(json.dumps(report))
print(f"rank {rank} of {world} done", flush=True)
finish()
