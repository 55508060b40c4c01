"""`smdistributed.dataparallel.torch.distributed`: ddpjob's DDP library under SageMaker's name."""

from ddpjob_runtime.dataparallel.torch.distributed import *  # noqa: F403
from ddpjob_runtime.dataparallel.torch.distributed import __all__  # noqa: F401
