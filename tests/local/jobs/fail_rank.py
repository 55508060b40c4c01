"""Rank `--fail-rank` raises once every rank has joined; the others wait in a collective."""

import argparse

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=1)
args = parser.parse_args()
dist.init_process_group()
dist.barrier()
if dist.get_rank() == args.fail_rank:
    raise ValueError(f"boom on rank {args.fail_rank}")
dist.all_reduce(torch.ones(1))  # never completes: the failing rank does not join
