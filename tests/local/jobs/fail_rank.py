"""Rank `--fail-rank` raises once every rank has joined; the others wait in a collective (or,
with `--others-sleep`, sleep until they are stopped)."""

import argparse
import time

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=1)
parser.add_argument("--others-sleep", type=int, default=0,
                    help="1: the other ranks sleep instead (they end only when stopped)")
args = parser.parse_args()
dist.init_process_group()
dist.barrier()
if dist.get_rank() == args.fail_rank:
    raise ValueError(f"boom on rank {args.fail_rank}")
if args.others_sleep:
    time.sleep(3600)
dist.all_reduce(torch.ones(1))  # never completes: the failing rank does not join
