"""The Linux capabilities a local host gives up, decided once, when the supervisor starts it.

`given_up` is the one decision (a pure function); the supervisor (`ddpjob.local.run.hosts`)
applies it to the process it starts, before the host's command runs: the sandbox takes the
capabilities out of its bounding set after mounting the host's namespace (`sandbox.wrap(...,
give_up=...)`), and a host without a namespace drops them between fork and exec (`preexec`).
Out of the bounding set, no program the host executes gains them, and a process the job's
template forks for the host takes the host's capabilities (`ddpjob_runtime.localkit.childsetup`).
Under SageMaker nothing is staged and nothing is given up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from ddpjob_runtime.shared import processes

from ddpjob.local.isolation.sandbox import CAP_SYS_ADMIN, held

log = logging.getLogger("ddpjob.local.run.supervisor")

# Root writes through a file's mode with it: into a staged file (a hard link to the job's one
# read-only copy, which every host reads) it would write into every host's view.
CAP_DAC_OVERRIDE = 1
CAP_SETPCAP = 8  # what lets a process drop capabilities from its bounding set
# CAP_SYS_ADMIN (the sandbox's): mounts; in its namespace root could undo the read-only mounts.


def given_up(*, root: bool, namespaces: bool, staged: bool) -> frozenset[int]:
    """The capabilities a host gives up: `root`, whether it runs as root; `namespaces`, whether
    it runs in its own mount namespace (the sandbox); `staged`, whether any of its channels is
    a hard-linked copy the local backend staged for the whole job.

    A host that is not root holds no capability once its command is executed (in a user
    namespace, none outside it). In its namespace a root host gives up CAP_SYS_ADMIN, so that
    it cannot remount what the mounts make read-only (the staged channels included). Without
    one, a root host with staged channels gives up CAP_DAC_OVERRIDE, so that the files' 0444
    mode holds for root too.
    """
    if not root:
        return frozenset()
    if namespaces:
        return frozenset({CAP_SYS_ADMIN})
    return frozenset({CAP_DAC_OVERRIDE}) if staged else frozenset()


def droppable(caps: frozenset[int]) -> frozenset[int]:
    """`caps`, or none (after a warning) where this process may not drop capabilities (no
    CAP_SETPCAP): then the staged files' mode protects them from non-root processes only."""
    if not caps or held(CAP_SETPCAP):
        return caps
    log.warning("running as root without CAP_SETPCAP: the hosts keep capabilities %s, so the "
                "staged channels are read-only for non-root processes only", sorted(caps))
    return frozenset()


def preexec(caps: Collection[int], first: Callable[[], None]) -> Callable[[], None]:
    """A Popen `preexec_fn`: `first()`, then take `caps` out of the child's bounding set, so
    that the program it executes holds none of them (an OSError fails the start)."""
    kept = tuple(sorted(caps))

    def in_the_child() -> None:
        first()
        for cap in kept:
            processes.drop_bounding_capability(cap)

    return in_the_child
