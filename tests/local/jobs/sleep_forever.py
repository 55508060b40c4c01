"""Says it runs (after joining the process group when launched distributed), then waits forever.

A plain run (one process per host, no torchrun) imports no torch: a test of what the supervisor
does pays for no torch import in its worker."""

import os
import time

rank = 0
if "WORLD_SIZE" in os.environ:  # under torchrun
    import ddpjob_runtime.dataparallel.torch.distributed as dist

    dist.init_process_group()
    rank = dist.get_rank()
print(f"rank {rank} sleeping", flush=True)
while True:
    time.sleep(1)
