"""Ends a test job's process group cleanly: shipped beside the scripts the tests run as jobs.

The tests ship this file as a user ships a helper module: in the estimator's `dependencies`
(`tests.conftest.GROUP_TEARDOWN`), or beside the script in its source folder; a script then
calls `finish()` as its last step. It needs torch only, not ddpjob_runtime, so the plain
`torch.distributed` scripts of SageMaker's containers and ModelTrainer use it too.
"""

import torch.distributed as dist


def finish() -> None:
    """Wait at a barrier for every rank, then destroy the default process group.

    A rank that tears its gloo connections down while a peer still has a collective in flight
    fails that peer ("Connection closed by peer") or aborts it at exit ("terminate called
    without an active exception"): a run that succeeded would flake. A no-op where there is no
    group (never initialised, or already destroyed), so a second call does nothing.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    dist.destroy_process_group()
