"""A job that only joins the process group and leaves: what the fit-overhead benchmark runs."""

import ddpjob_runtime.dataparallel.torch.distributed as dist
from group_teardown import finish

dist.init_process_group()
dist.barrier()
print(f"rank {dist.get_rank()} of {dist.get_world_size()} done", flush=True)
finish()
