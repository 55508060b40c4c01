"""Says it runs (after joining the process group when launched distributed), then waits forever."""

import time

import ddpjob_runtime.dataparallel.torch.distributed as dist

rank = 0
if dist.is_available():
    dist.init_process_group()
    rank = dist.get_rank()
print(f"rank {rank} sleeping", flush=True)
while True:
    time.sleep(1)
