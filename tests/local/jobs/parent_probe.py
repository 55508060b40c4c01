"""Says which process started this rank (its parent's command line) and joins the group."""

import os
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
from group_teardown import finish

parent = Path(f"/proc/{os.getppid()}/cmdline").read_text().replace("\0", " ")
dist.init_process_group()
dist.barrier()
# One write: the ranks of a host share its log, and an unbuffered print writes its text and
# its newline apart, so another rank's line could land between them.
os.write(1, f"rank {dist.get_rank()} parent: {parent}\n".encode())
finish()
