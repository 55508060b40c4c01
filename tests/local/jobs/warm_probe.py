"""Runs twice on one warm pool. `--phase leave` leaves traces of this job: an environment
variable, an imported user module, an attribute on the preloaded torch module, files in its
temporary folder and its /opt/ml, a listening socket (its port printed). `--phase check` exits 1
naming whichever of them it finds (`--port`: the port the first job listened on). Both say which
process forked them."""

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--phase", choices=("leave", "check"), required=True)
parser.add_argument("--port", type=int, default=0)
args, _ = parser.parse_known_args()
dist.init_process_group()
rank = dist.get_rank()
parent = Path(f"/proc/{os.getppid()}/cmdline").read_text().replace("\0", " ")
print(f"rank {rank} parent: {parent}", flush=True)
root = Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"))
files = [Path(tempfile.gettempdir()) / f"warm-trace-{rank}", root / f"warm-trace-{rank}"]
if args.phase == "leave":
    os.environ["WARM_TRACE"] = "1"
    import warm_trace_module  # noqa: F401
    torch.warm_trace = True
    for path in files:
        path.write_text("left by the first job")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    print(f"rank {rank} port {listener.getsockname()[1]}", flush=True)
    finish()
    sys.exit(0)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


found = [what for what, there in (
    ("environment variable", "WARM_TRACE" in os.environ),
    ("user module", "warm_trace_module" in sys.modules),
    ("torch attribute", hasattr(torch, "warm_trace")),
    *((f"file {path}", path.exists()) for path in files),
    (f"socket {args.port}", bool(args.port) and listening(args.port)),
) if there]
print(f"rank {rank} found: {found}", flush=True)
finish()
sys.exit(1 if found else 0)
