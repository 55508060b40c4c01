"""noop.py plus outputs: joins the process group; rank 0 writes model.txt and checkpoint step 7."""

import argparse
import os
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
from ddpjob_runtime import checkpoints
from group_teardown import finish

parser = argparse.ArgumentParser()
parser.add_argument("--tag", default="none")
args = parser.parse_args()
dist.init_process_group()
dist.barrier()
if dist.get_rank() == 0:
    Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text(f"tag={args.tag}\n")
    checkpoints.save({"tag": args.tag}, step=7)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} done, tag={args.tag}", flush=True)
finish()
