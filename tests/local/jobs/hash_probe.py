"""Says this rank's str hash of a fixed string, its warning options (PYTHONWARNINGS) and which
process started it, after a barrier."""

import os
import sys
from pathlib import Path

import ddpjob_runtime.dataparallel.torch.distributed as dist
from group_teardown import finish

parent = Path(f"/proc/{os.getppid()}/cmdline").read_text().replace("\0", " ")
dist.init_process_group()
dist.barrier()
rank = dist.get_rank()
# One write: the ranks of a host share its log (see parent_probe.py).
os.write(1, f"rank {rank} hash: {hash('some string')}\nrank {rank} parent: {parent}\n"
            f"rank {rank} warnoptions: {sys.warnoptions}\n".encode())
finish()
