"""A local host's stand-in for SageMaker's `smdistributed` (only its data-parallel library).

SageMaker's GPU containers install `smdistributed.dataparallel`; a local host's workers find
this folder's copy at the end of their path when their Python has no `smdistributed`
(`ddpjob_runtime.platform.stand_ins`), so a script written for SageMaker runs unchanged. It maps
onto `ddpjob_runtime.dataparallel` and torch's gloo (CPU) or NCCL (GPU). Never on the user's
own path, never shipped to SageMaker (it is part of `ddpjob_runtime.localkit`).
"""
