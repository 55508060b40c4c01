"""Local warm pools (`ResourceConfig.KeepAlivePeriodInSeconds`): records under `<home>/pools/`.

A pool is one keeper process (`poolkeeper`) and, for jobs whose hosts run ddpjob's runtime, one
template process (torch and the runtime imported, `ddpjob_runtime.localkit.zygote`) every host of a
job on the pool forks its runtime, agent and workers from (a pool of jobs that run an image's own
program, or of `DDPJOB_PRELOAD=0`, holds none: on SageMaker a reused instance starts a fresh
container). Each host of a job on a pool has its persistent cache under the pool (`poolcache`).
`<home>/pools/<id>/pool.json` says which jobs ran on it, which one holds it now and until when
it stays warm. Every read-modify-write holds `<home>/pools/.lock`,
so that two supervisors never claim one pool.

As on SageMaker: a job that asks for a keep-alive and finds an Available pool whose request
matches (`match_key`) claims it (InUse; the pool's last job becomes Reused); at the job's end
the pool is Available again for the job's own keep-alive; it is Terminated when that passes,
when stopped (`stop`, `UpdateTrainingJob` with `KeepAlivePeriodInSeconds` 0), after an internal
error, when its home is removed, under memory pressure (`poolkeeper`), or when its keeper died.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import hashlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpjob_runtime.shared import fsutil, proctitle
from ddpjob_runtime.shared.errors import UnsafePathError

from ddpjob.job_status import InvalidTransition
from ddpjob.local.base import proctree
from ddpjob.local.base.admitted import AdmittedJob
from ddpjob.local.base.jobstore import private_dir, read_json, write_json
from ddpjob.local.warmpools import poolcache


class PoolStatus(str, enum.Enum):
    """A warm pool's status, spelled as its record on disk and `WarmPoolStatus` spell it."""

    IN_USE = "InUse"
    AVAILABLE = "Available"
    TERMINATED = "Terminated"


IN_USE, AVAILABLE, TERMINATED = PoolStatus.IN_USE, PoolStatus.AVAILABLE, PoolStatus.TERMINATED
REUSED = "Reused"  # WarmPoolStatus of a job whose pool a later job took; never a pool's own
# A job takes an Available pool and gives it back at its end; a pool ends (its keep-alive
# passed, a stop, its keeper or supervisor gone) from either, and never comes back.
ALLOWED_POOL_MOVES: dict[PoolStatus, frozenset[PoolStatus]] = {
    IN_USE: frozenset({AVAILABLE, TERMINATED}),
    AVAILABLE: frozenset({IN_USE, TERMINATED}),
    TERMINATED: frozenset(),
}
RECORD = "pool.json"
KEEPER_MODULE = "ddpjob.local.warmpools.poolkeeper"
# What SageMaker compares to decide that a job may reuse a warm pool, and what this machine
# adds: the interpreter and the import path the template imported torch and the runtime with.
_MATCHED = ("RoleArn", "AlgorithmSpecification.TrainingImage", "ResourceConfig.InstanceType",
            "ResourceConfig.InstanceCount", "ResourceConfig.VolumeSizeInGB",
            "ResourceConfig.VolumeKmsKeyId", "VpcConfig", "EnableNetworkIsolation",
            "EnableInterContainerTrafficEncryption")


@dataclass
class Pool:
    """One warm pool's record (`pool.json`); times are epoch seconds."""

    id: str
    key: str
    status: PoolStatus  # changed by `move` only
    keep_alive: int  # of the last job: how long the pool stays Available after it
    instance_type: str
    instance_count: int
    jobs: list[dict[str, Any]] = field(default_factory=list)  # {"job", "start", "end"}
    supervisor_pid: int | None = None  # of the job that holds it (InUse)
    keeper_pid: int | None = None
    template: str = ""  # what names the template to its clients (DDPJOB_ZYGOTE)
    template_pid: int | None = None
    template_started: int | None = None  # with the pid, the template's identity (`proctree`)
    stop_requested: str = ""  # why it is to end (the keeper ends it)
    terminated_at: float | None = None
    reason: str = ""  # why it ended
    preloaded: bool = True  # whether it holds a template (its jobs' hosts run ddpjob's runtime)

    def __post_init__(self) -> None:
        self.status = PoolStatus(self.status)  # as read from the record

    @property
    def job(self) -> str:
        """The job that holds the pool now, or last held it."""
        return self.jobs[-1]["job"]

    @property
    def expires_at(self) -> float | None:
        """When an Available pool ends (None while a job holds it)."""
        end = self.jobs[-1].get("end")
        return None if self.status != AVAILABLE or end is None else end + self.keep_alive


def move(pool: Pool, new: PoolStatus, *, reason: str = "",
         supervisor_pid: int | None = None) -> None:
    """The one place a pool's status changes: to `new`, held by the job whose supervisor is
    `supervisor_pid` (InUse) or ended for `reason` (Terminated); InvalidTransition when
    `ALLOWED_POOL_MOVES` does not allow it (a bug in the caller)."""
    if new not in ALLOWED_POOL_MOVES[pool.status]:
        raise InvalidTransition(f"a warm pool cannot move from {pool.status.value} to "
                                f"{new.value}")
    if new is TERMINATED:
        pool.reason, pool.terminated_at = reason, time.time()
    pool.status, pool.supervisor_pid = new, supervisor_pid


def _get(request: dict[str, Any], dotted: str) -> Any:
    value: Any = request
    for part in dotted.split("."):
        value = (value or {}).get(part)
    return value


def match_key(request: dict[str, Any], preloaded: bool = True) -> str | None:
    """What a pool and a job must share for the job to start on it; None when the job asks for
    no keep-alive (SageMaker: only such a job creates or reuses a warm pool) or for spot
    capacity (which SageMaker never keeps warm). Locally a job whose hosts fork from a template
    (`preloaded`) takes only a pool that holds one, and the other way round."""
    keep_alive = int(_get(request, "ResourceConfig.KeepAlivePeriodInSeconds") or 0)
    if keep_alive <= 0 or request.get("EnableManagedSpotTraining"):
        return None
    matched = {name: _get(request, name) for name in _MATCHED}
    matched["python"], matched["preloaded"] = sys.executable, preloaded
    matched["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    return hashlib.sha256(json.dumps(matched, sort_keys=True).encode()).hexdigest()[:32]


def pools_dir(home: Path) -> Path:
    return Path(home) / "pools"


@contextlib.contextmanager
def _locked(home: Path, create: bool = False) -> Iterator[Path]:
    """Hold the pools' lock; only `create` makes the folder (a removed home stays removed)."""
    folder = private_dir(pools_dir(home)) if create else pools_dir(home)
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read(folder: Path) -> Pool:
    return Pool(**read_json(folder / RECORD))


def write(folder: Path, pool: Pool) -> None:
    """Replace the record of the pool folder `folder` (atomically)."""
    write_json(folder / RECORD, dataclasses.asdict(pool))


def _records(folder: Path) -> Iterator[tuple[Path, Pool]]:
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, TypeError):
            yield entry, read(entry)


def update(home: Path, pool_id: str, change: Callable[[Pool], object]) -> Pool:
    """Apply `change` to pool `pool_id`'s record under the pools' lock; the record after it."""
    with _locked(home) as folder:
        pool = read(folder / pool_id)
        change(pool)
        write(folder / pool_id, pool)
        return pool


def seen(pool: Pool) -> Pool:
    """The pool as readers see it: one whose keeper is gone has ended (a copy)."""
    if pool.status == TERMINATED or proctree.is_alive(pool.keeper_pid) or not pool.keeper_pid:
        return pool
    view = dataclasses.replace(pool)
    move(view, TERMINATED, reason="keeper gone")
    return view


def claim(home: Path, key: str, job: str, supervisor_pid: int) -> Pool | None:
    """Take an Available pool that matches `key` for `job` (InUse), or None."""
    if not pools_dir(home).is_dir():
        return None
    with _locked(home) as folder:
        for entry, pool in _records(folder):
            status = seen(pool).status
            if status == TERMINATED:  # its keeper may have died before removing it
                poolcache.remove(entry)
            if (pool.key != key or status != AVAILABLE or pool.stop_requested
                    or time.time() >= (pool.expires_at or 0) or not _has_template(pool)):
                continue
            move(pool, IN_USE, supervisor_pid=supervisor_pid)
            pool.jobs.append({"job": job, "start": time.time()})
            write(entry, pool)
            return pool
    return None


def _has_template(pool: Pool) -> bool:
    """Whether the pool's template, if it holds one, still runs: the recorded process, not
    another that got its pid (its keeper ends it soon, but a job may ask before)."""
    return not pool.preloaded or (
        pool.template_started is not None
        and proctree.started(pool.template_pid) == pool.template_started)


def create(home: Path, job: AdmittedJob, key: str, supervisor_pid: int,
           preloaded: bool = True) -> Path:
    """A new pool record held by `job` (InUse), with a template if `preloaded`; its keeper is
    not started yet."""
    pool = Pool(id=f"pool-{secrets.token_hex(6)}", key=key, status=IN_USE,
                keep_alive=job.keep_alive_s, instance_type=job.instance_type,
                instance_count=len(job.hosts), jobs=[{"job": job.name, "start": time.time()}],
                supervisor_pid=supervisor_pid, preloaded=preloaded)  # fmt: skip
    with _locked(home, create=True) as folder:
        (folder / pool.id).mkdir(mode=0o700)
        write(folder / pool.id, pool)
    return folder / pool.id


def release(home: Path, pool_id: str, job: str, seconds: int, end_reason: str = "") -> None:
    """`job` ended: the pool is Available for `seconds` (its keep-alive), or is to end
    (`end_reason`)."""
    def change(pool: Pool) -> None:
        if pool.job != job or pool.status != IN_USE:
            return
        pool.jobs[-1]["end"] = time.time()
        move(pool, AVAILABLE)
        pool.keep_alive = min(pool.keep_alive, seconds) if pool.stop_requested else seconds
        pool.stop_requested = pool.stop_requested or end_reason

    update(home, pool_id, change)


def pools(home: Path) -> list[Pool]:
    """Every pool of `home` as readers see it, oldest first."""
    found = [seen(p) for _, p in _records(pools_dir(home))]
    return sorted(found, key=lambda p: p.jobs[0]["start"])


def stop(home: Path, pool_id: str, reason: str = "stopped by the user") -> Pool:
    """End pool `pool_id`: at once when Available, when its job ends when InUse (as
    SageMaker's `KeepAlivePeriodInSeconds` 0 does). KeyError when there is no such pool (a
    name that leads out of the pools' folder names none)."""
    try:
        folder = fsutil.contained(pools_dir(home), pool_id, "warm pool name")
    except UnsafePathError:
        raise KeyError(pool_id) from None
    if not (folder / RECORD).is_file():
        raise KeyError(pool_id)

    def change(pool: Pool) -> None:
        if pool.status != TERMINATED:
            pool.stop_requested, pool.keep_alive = reason, 0

    pool = update(home, pool_id, change)
    if pool.status == AVAILABLE and _is_keeper(pool):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pool.keeper_pid, signal.SIGTERM)  # it polls too; the signal saves time
    return pool


def _is_keeper(pool: Pool) -> bool:
    """Whether the pool's keeper pid is still its keeper (pids get reused)."""
    args = proctree.cmdline(pool.keeper_pid) if pool.keeper_pid else []
    words = " ".join(args).split()  # a titled keeper: `ddpjob-pool-keeper POOL_FOLDER`
    return bool({KEEPER_MODULE, proctitle.title("pool-keeper")} & set(words)) and any(
        w.endswith(f"/{pool.id}") for w in words)


def _of_job(home: Path, job: str) -> Pool | None:
    return next((p for p in pools(home) if any(j["job"] == job for j in p.jobs)), None)


def template_of(home: Path, job: str) -> tuple[int, int | None] | None:
    """The pid and start time of the template of the warm pool `job` holds (None when it holds
    none, or its pool has no template)."""
    pool = _of_job(home, job)
    if pool is None or pool.job != job or pool.status != IN_USE or pool.template_pid is None:
        return None
    return pool.template_pid, pool.template_started


def set_keep_alive(home: Path, job: str, seconds: int) -> bool:
    """`UpdateTrainingJob(ResourceConfig={"KeepAlivePeriodInSeconds": seconds})` of `job`: the
    pool it holds, or left Available, stays warm that long after the job's end (0 ends it);
    False when the job holds no pool."""
    pool = _of_job(home, job)
    if pool is None or pool.job != job or pool.status == TERMINATED:
        return False
    if seconds == 0:
        stop(home, pool.id, "KeepAlivePeriodInSeconds set to 0 (UpdateTrainingJob)")
    else:
        update(home, pool.id, lambda p: setattr(p, "keep_alive", seconds))
    return True


def warm_pool_status(home: Path, job: str) -> dict[str, object] | None:
    """DescribeTrainingJob's `WarmPoolStatus` of `job` (None when it ran on no pool)."""
    pool = _of_job(home, job)
    if pool is None:
        return None
    index = next(i for i, j in enumerate(pool.jobs) if j["job"] == job)
    end = pool.jobs[index].get("end")
    if index + 1 < len(pool.jobs):
        nxt = pool.jobs[index + 1]
        return {"Status": REUSED, "ReusedByJob": nxt["job"],
                "ResourceRetainedBillableTimeInSeconds": int(max(0, nxt["start"] - end))}
    status = pool.status if end is not None or pool.status == TERMINATED else IN_USE
    until = pool.terminated_at if pool.status == TERMINATED else time.time()
    answer: dict[str, object] = {"Status": status.value}
    if end is not None:
        answer["ResourceRetainedBillableTimeInSeconds"] = int(max(0, (until or end) - end))
    return answer


def summary(pool: Pool) -> dict[str, object]:
    """What `ddpjob pools list` and `LocalSession.warm_pools` show of a pool."""
    expires = pool.expires_at
    return {"Name": pool.id, "Status": pool.status.value, "Job": pool.job,
            "Jobs": [j["job"] for j in pool.jobs], "InstanceType": pool.instance_type,
            "InstanceCount": pool.instance_count, "KeepAlivePeriodInSeconds": pool.keep_alive,
            "ExpiresInSeconds": None if expires is None else max(0, int(expires - time.time())),
            **({"Reason": pool.reason} if pool.reason else {})}
