"""A script whose every host writes into its own checkpoint folder, for the checkpoint sync of
every kind of local host (ddpjob's runtime, SageMaker's PyTorch toolkit, a container command).

--mode files      each rank writes `<host>-rank<r>.json`; each host's local rank 0 writes
                  `config.json`, the same bytes on every host (torch-free, no process group:
                  a container command runs it once per host)
--mode dcp-save   a DTensor sharded over every rank (as FSDP shards), saved with
                  torch.distributed.checkpoint under `<checkpoint folder>/dcp` (a file per rank)
--mode dcp-load   the same DTensor loaded back by every rank, checked, `dcp loaded rank=R`
--mode clash      `same.txt` from the first host, then (once it reached --uri) from the
                  second host with other bytes; `--mode same`: the same bytes from both
Modes combine: `--mode files,clash`.
"""

import argparse
import json
import os
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True, help="files, dcp-save, dcp-load, clash, same")
parser.add_argument("--token", type=float, default=0.0)
parser.add_argument("--uri", default="")
args = parser.parse_args()
modes = set(args.mode.split(","))

ROOT = Path(os.environ.get("SAGEMAKER_BASE_DIR") or "/opt/ml")
FOLDER = Path(os.environ.get("DDPJOB_CHECKPOINT_DIR") or ROOT / "checkpoints")
HOST = os.environ.get("SM_CURRENT_HOST") or json.loads(
    (ROOT / "input/config/resourceconfig.json").read_text())["current_host"]
RANK, LOCAL_RANK = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
FOLDER.mkdir(parents=True, exist_ok=True)

if "files" in modes:
    (FOLDER / f"{HOST}-rank{RANK}.json").write_text(json.dumps({"host": HOST, "rank": RANK}))
    if LOCAL_RANK == 0:
        (FOLDER / "config.json").write_text(json.dumps({"lr": 0.1}))
if not modes - {"files"}:
    raise SystemExit(0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from group_teardown import finish  # noqa: E402

dist.init_process_group("gloo")
world = dist.get_world_size()

if modes & {"dcp-save", "dcp-load"}:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(world * 4 * 3, dtype=torch.float32).reshape(world * 4, 3) + args.token
    if "dcp-save" in modes:
        dcp.save({"w": distribute_tensor(full, mesh, [Shard(0)])}, checkpoint_id=FOLDER / "dcp")
        print(f"dcp saved rank={RANK}", flush=True)
    else:
        state = {"w": distribute_tensor(torch.zeros_like(full), mesh, [Shard(0)])}
        dcp.load(state, checkpoint_id=FOLDER / "dcp")
        assert torch.equal(state["w"].to_local(), full.chunk(world)[RANK]), state["w"].to_local()
        print(f"dcp loaded rank={RANK}", flush=True)
if modes & {"clash", "same"}:  # the first host's upload is there before the second host writes
    from ddpjob_runtime.shared import storage

    text = f"from {HOST}" if "clash" in modes else "same"
    first = RANK == 0
    if first:
        (FOLDER / "same.txt").write_text(text)
        deadline = time.monotonic() + 120
        while not storage.exists(storage.join(args.uri, "same.txt")):
            assert time.monotonic() < deadline, "same.txt never reached the checkpoint URI"
            time.sleep(0.2)
    dist.barrier()
    if not first and LOCAL_RANK == 0:
        (FOLDER / "same.txt").write_text(text)
finish()
