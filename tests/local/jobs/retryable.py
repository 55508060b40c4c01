"""Trains `--steps` steps from the latest checkpoint, rank 0 checkpointing every step.

A fresh start (no checkpoint; every start with `--always true`) trains `--wait-after` steps,
then rank 0 writes `ready-<first step>` into its output data folder and every rank waits in
collectives to be killed (the test SIGKILLs a host's ddpjob-train). Each rank prints what it
resumed from: `rank R loaded L first F`.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from ddpjob_runtime import checkpoints
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--wait-after", type=int, default=2)
parser.add_argument("--always", default="false")
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
state = checkpoints.load_latest()
loaded = state["step"] if state is not None else None
first = loaded + 1 if loaded is not None else 0
print(f"rank {rank} loaded {loaded} first {first}", flush=True)
for step in range(first, args.steps):
    if step == first + args.wait_after and (loaded is None or args.always.lower() == "true"):
        if rank == 0:
            Path(os.environ["SM_OUTPUT_DATA_DIR"], f"ready-{first}").touch()
        for _ in range(600):
            dist.all_reduce(torch.ones(1))
            time.sleep(0.1)
        sys.exit("nobody killed a host within 60 s")
    dist.all_reduce(torch.ones(1))
    if checkpoints.save({"step": step}, step=step):
        checkpoints.flush()  # complete here and remotely before any rank starts the next step
    dist.barrier()
print(f"rank {rank} done", flush=True)
finish()
