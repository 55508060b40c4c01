"""A hung job: rank 1 sleeps outside any collective, the other ranks block in all_reduce
waiting for it. Each rank says once it got there, so a test knows when to look."""

import os
import time

import ddpjob_runtime.dataparallel.torch.distributed as dist
import torch


def slow_step() -> None:
    os.write(1, f"rank {dist.get_rank()} in slow_step\n".encode())
    time.sleep(3600)  # never reaches the collective


def main() -> None:
    dist.init_process_group()
    dist.barrier()
    if dist.get_rank() == 1:
        slow_step()
    os.write(1, f"rank {dist.get_rank()} in all_reduce\n".encode())
    dist.all_reduce(torch.ones(1))


main()
