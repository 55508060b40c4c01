"""A ModelTrainer job's script as it runs on SageMaker: torchrun's variables, /opt/ml hard-coded.

It resumes from /opt/ml/checkpoints/state.pt (SageMaker brings CheckpointConfig.S3Uri down
there), takes `--steps` SGD steps on the mean of the `training` channel's values with an
all_reduce across every rank of every host, checkpoints each step from rank 0 and writes
/opt/ml/model/model.pt. `--fail true` raises on the last rank; `--sleep S` waits each step.
Without torchrun (ModelTrainer's basic script driver) it is one process, rank 0 of 1.
"""

import argparse
import importlib.util
import os
import time

import torch
import torch.distributed as dist
from group_teardown import finish

CHECKPOINT = "/opt/ml/checkpoints/state.pt"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail", default="false")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    distributed = "RANK" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    with open("/opt/ml/input/data/training/values.txt") as f:
        values = [float(v) for v in f.read().split()]
    start, w = 0, torch.zeros(1)
    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT)
        start, w = state["step"] + 1, state["w"]
        print(f"rank {rank} resumed from step {state['step']}", flush=True)
    probe = importlib.util.find_spec("ddpjobprobe")
    print(f"rank {rank} requirement {probe.origin if probe else None}", flush=True)
    for step in range(start, start + args.steps):
        grad = w - values[rank % len(values)]
        if distributed:
            dist.all_reduce(grad)
        w = w - 0.5 * grad / world
        if args.fail == "true" and rank == world - 1:
            raise ValueError(f"rank {rank} found a bad value at step {step}")
        print(f"rank {rank}/{world} host {os.environ['SM_CURRENT_HOST']} step {step} "
              f"w {w.item():.4f}", flush=True)
        if rank == 0:
            torch.save({"step": step, "w": w}, CHECKPOINT)
        time.sleep(args.sleep)
    if rank == 0:
        torch.save({"w": w}, "/opt/ml/model/model.pt")
    finish()


if __name__ == "__main__":
    main()
