"""A DDP job for SageMaker's PyTorch container: the runtime comes from the code archive.

Fits w to the channel's target (loss = mean((w - target)^2)) with SGD, one checkpoint per step
through ddpjob_runtime.checkpoints; a restarted job resumes after the latest checkpoint. Prints
`step=K loss=L` (rank 0), `resumed rank=R step=K` or `fresh start rank=R`, and where the runtime
was imported from.
"""

import argparse
import importlib.util
import json
import os
from pathlib import Path

import ddpjob_runtime
import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch
from ddpjob_runtime import checkpoints
from ddpjob_runtime.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.25)
args = parser.parse_args()

dist.init_process_group()
rank = dist.get_rank()
print(f"runtime_from={Path(ddpjob_runtime.__file__).parent} code_dir={Path(__file__).parent} "
      f"ddpjob_installed={importlib.util.find_spec('ddpjob') is not None} "
      f"host={os.environ['SM_CURRENT_HOST']} world={dist.get_world_size()}", flush=True)
target = torch.tensor(json.loads(
    (Path(os.environ["SM_CHANNEL_TRAINING"]) / "target.json").read_text()))


class Fit(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros_like(target))

    def forward(self) -> torch.Tensor:
        return ((self.w - target) ** 2).mean()


model = DDP(Fit())
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
state = checkpoints.load_latest()
start = 0
if state is None:
    print(f"fresh start rank={rank}", flush=True)
else:
    model.module.load_state_dict(state["model"])
    start = state["step"] + 1
    print(f"resumed rank={rank} step={state['step']}", flush=True)
for step in range(start, args.steps):
    optimizer.zero_grad()
    loss = model()
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step={step} loss={loss.item()!r}", flush=True)
    checkpoints.save({"model": model.module.state_dict(), "step": step}, step=step)
checkpoints.flush()
if rank == 0:
    torch.save(model.module.state_dict(), Path(os.environ["SM_MODEL_DIR"]) / "model.pt")
finish()
