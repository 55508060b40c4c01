"""Each rank prints three lines to stdout, one to stderr, then one more to stdout, each naming
the rank; ranks interleave their lines."""

import sys

import ddpjob_runtime.dataparallel.torch.distributed as dist
from group_teardown import finish

dist.init_process_group()
rank = dist.get_rank()
for step in range(3):
    print(f"step {step} of rank {rank}: loss={rank}.{step}5")
    dist.barrier()
print(f"a warning from rank {rank}", file=sys.stderr)
dist.barrier()
print(f"last words of rank {rank}")
finish()
