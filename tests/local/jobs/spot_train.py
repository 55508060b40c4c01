"""A spot-ready trainer: `--steps` steps of `--step-s` s from the latest checkpoint, rank 0
checkpointing every step, nothing done on SIGTERM but dying (the platform syncs the folder).

A start whose first step is in `--hold-at` (comma-separated) trains `--hold-after` steps, then
rank 0 writes `note-<first>` into the checkpoint folder (a file the platform must never lose)
and `ready-<first>` into its output data folder, and every rank waits in collectives to be
interrupted; with `--ignore-sigterm true` the workers outlive the notice (SIGKILL ends them).
`--model-mb` MB of random bytes go into the model folder (a slow final upload).
Prints `rank R loaded L first F`, then, on rank 0 at the end, the notes it finds.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from ddpjob_runtime import checkpoints
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--step-s", type=float, default=0.0)
parser.add_argument("--hold-at", default="")
parser.add_argument("--hold-after", type=int, default=2)
parser.add_argument("--model-mb", type=int, default=0)
parser.add_argument("--ignore-sigterm", default="false")
args = parser.parse_args()
if args.ignore_sigterm == "true":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
hold_at = {int(step) for step in args.hold_at.split(",") if step}
dist.init_process_group("gloo")
rank = dist.get_rank()
state = checkpoints.load_latest()
loaded = state["step"] if state is not None else None
first = loaded + 1 if loaded is not None else 0
print(f"rank {rank} loaded {loaded} first {first}", flush=True)
for step in range(first, args.steps):
    if step == first + args.hold_after and first in hold_at:
        if rank == 0:
            (checkpoints.checkpoint_dir() / f"note-{first}").write_text(f"held at {step}")
            Path(os.environ["SM_OUTPUT_DATA_DIR"], f"ready-{first}").touch()
        for _ in range(1200):
            dist.all_reduce(torch.ones(1))
            time.sleep(0.1)
        sys.exit("nobody interrupted the job within 120 s")
    dist.all_reduce(torch.ones(1))
    time.sleep(args.step_s)
    if checkpoints.save({"step": step}, step=step):
        checkpoints.flush()  # complete here and remotely before any rank starts the next step
    dist.barrier()
if rank == 0:
    notes = sorted(p.name for p in checkpoints.checkpoint_dir().glob("note-*"))
    print(f"rank 0 notes {notes}", flush=True)
    if args.model_mb:
        Path(os.environ["SM_MODEL_DIR"], "weights.bin").write_bytes(
            os.urandom(args.model_mb << 20))
print(f"rank {rank} done", flush=True)
finish()
