"""Reports what this host sees in the `train` channel, and tries to change it.

Every rank (one per host) records `{relative path: [sha256, inode]}` of its channel folder in
`<SM_OUTPUT_DATA_DIR>/view-before.json`. Then the last rank tries to write into a staged file,
(with `--chmod true`) to `chmod` it writable and write it, and to replace its own `a.txt` with
new bytes, recording each outcome (`done`, or the exception and errno name) in `attempts.json`;
after a barrier every rank records its view again in `view-after.json`. With one host, only
the views are recorded.
"""

import errno
import hashlib
import json
import os
import sys
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
from group_teardown import finish

channel = Path(os.environ["SM_CHANNEL_TRAIN"])
out = Path(os.environ["SM_OUTPUT_DATA_DIR"])


def view() -> dict:
    return {p.relative_to(channel).as_posix(): [hashlib.sha256(p.read_bytes()).hexdigest(),
                                                p.stat().st_ino]
            for p in sorted(channel.rglob("*")) if p.is_file()}


def attempt(action) -> str:
    try:
        action()
    except OSError as exc:
        return f"{type(exc).__name__} {errno.errorcode.get(exc.errno, exc.errno)}"
    return "done"


def write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def replace_own_link() -> None:
    (channel / "a.txt").unlink()  # its own link: only its own view changes
    write(channel / "a.txt", "this host's own a.txt")


dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
(out / "view-before.json").write_text(json.dumps(view()))
dist.barrier()
if size > 1 and rank == size - 1:
    attempts = {"write": attempt(lambda: write(channel / "a.txt", "changed by the last host"))}
    if sys.argv[1:] == ["--chmod", "true"]:
        attempts["chmod"] = attempt(lambda: os.chmod(channel / "a.txt", 0o644))
        attempts["write after chmod"] = attempt(
            lambda: write(channel / "a.txt", "changed after chmod"))
    attempts["replace"] = attempt(replace_own_link)
    (out / "attempts.json").write_text(json.dumps(attempts))
dist.barrier()
(out / "view-after.json").write_text(json.dumps(view()))
print(f"rank {rank} probed {len(view())} files", flush=True)
finish()
