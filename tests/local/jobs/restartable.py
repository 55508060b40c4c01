"""Trains `--steps` steps from the latest checkpoint, rank 0 checkpointing every step.

`--victim` SIGKILLs itself at the start of step `--kill-at` on the first attempt (every attempt
with `--always`). Each rank prints what it resumed from: `rank R attempt A loaded L first F`.
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist
from ddpjob_runtime import checkpoints
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--victim", type=int, default=-1)
parser.add_argument("--kill-at", type=int, default=3)
parser.add_argument("--always", default="false")
args = parser.parse_args()
always = args.always.lower() == "true"
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo")
rank = dist.get_rank()
state = checkpoints.load_latest()
loaded = state["step"] if state is not None else None
first = loaded + 1 if loaded is not None else 0
print(f"rank {rank} attempt {attempt} loaded {loaded} first {first}", flush=True)
for step in range(first, args.steps):
    if rank == args.victim and step == args.kill_at and (attempt == 0 or always):
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))
    if checkpoints.save({"step": step}, step=step):
        checkpoints.flush()  # complete here and remotely before any rank starts the next step
    dist.barrier()
print(f"rank {rank} done", flush=True)
finish()
