"""A script that checkpoints the way many SageMaker scripts do: a plain `torch.save` into the
checkpoint folder (no ddpjob_runtime.checkpoints), plus one `checkpoints.save` step folder and a
TensorBoard event file. It reports what its host found in the checkpoint folder at start."""

import argparse
import os
from pathlib import Path

import torch
from ddpjob_runtime import checkpoints

parser = argparse.ArgumentParser()
parser.add_argument("--epoch", type=int, required=True)
parser.add_argument("--token", required=True)
args = parser.parse_args()

folder = Path(os.environ["DDPJOB_CHECKPOINT_DIR"])
rank = int(os.environ["RANK"])
previous = folder / "model_epoch1.pt"
if previous.is_file():
    print(f"found rank={rank} token={torch.load(previous)['token']}", flush=True)
else:
    print(f"nothing found rank={rank}", flush=True)
if rank == 0:
    torch.save({"epoch": args.epoch, "token": args.token}, folder / f"model_epoch{args.epoch}.pt")
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "logs" / "notes.txt").write_text(args.token)
    checkpoints.save({"epoch": args.epoch}, step=args.epoch)
    board = Path(os.environ["DDPJOB_TENSORBOARD_DIR"])
    (board / "train").mkdir(parents=True, exist_ok=True)
    (board / "train" / "events.out.tfevents.1").write_text(args.token)
