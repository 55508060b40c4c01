"""Reports what this host sees in the `train` channel, and tries to change it.

Every rank (one per host) records `{relative path: [sha256, inode]}` of its channel folder in
`<SM_OUTPUT_DATA_DIR>/view-before.json`. Then the last rank tries to write into a staged file
(recording the error it got) and replaces its own `a.txt` with new bytes; after a barrier every
rank records its view again in `view-after.json`. With one host, only the views are recorded.
"""

import hashlib
import json
import os
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist

channel = Path(os.environ["SM_CHANNEL_TRAIN"])
out = Path(os.environ["SM_OUTPUT_DATA_DIR"])


def view() -> dict:
    return {p.relative_to(channel).as_posix(): [hashlib.sha256(p.read_bytes()).hexdigest(),
                                                p.stat().st_ino]
            for p in sorted(channel.rglob("*")) if p.is_file()}


dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
(out / "view-before.json").write_text(json.dumps(view()))
dist.barrier()
if size > 1 and rank == size - 1:
    try:
        with open(channel / "a.txt", "w") as f:
            f.write("changed by the last host")
        outcome = "written"
    except PermissionError as exc:
        outcome = f"PermissionError {exc.errno}"
    (out / "write.txt").write_text(outcome)
    (channel / "a.txt").unlink()  # its own link: allowed, and only its own view changes
    (channel / "a.txt").write_text("this host's own a.txt")
dist.barrier()
(out / "view-after.json").write_text(json.dumps(view()))
print(f"rank {rank} probed {len(view())} files", flush=True)
