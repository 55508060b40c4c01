"""Rank 0 checkpoints to an S3 endpoint that never answers, then waits to be stopped.

Every rank stops gracefully on SIGTERM (a flag, as training scripts do), so rank 0's worker
then waits for its checkpoint upload before it exits: it outlives any SIGTERM. `--endpoint` is
the never-answering endpoint; rank 0 prints "uploading" once its upload is under way.
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from ddpjob_runtime import checkpoints

parser = argparse.ArgumentParser()
parser.add_argument("--endpoint", required=True)
args = parser.parse_args()
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
os.environ.update({
    "AWS_ENDPOINT_URL": args.endpoint, "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
    "DDPJOB_CHECKPOINT_URI": "s3://checkpoints/stuck",
})  # fmt: skip
dist.init_process_group("gloo")
rank = dist.get_rank()
if checkpoints.save({"weights": torch.zeros(1024, 1024)}, step=0):
    print(f"rank {rank} uploading", flush=True)
while not stopping:
    time.sleep(0.1)
print(f"rank {rank} stopping", flush=True)
