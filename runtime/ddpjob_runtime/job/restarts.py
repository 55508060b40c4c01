"""What every host's torchrun agent does between a failed attempt and the next (worker restarts).

With a static rendezvous each agent restarts its own workers when they fail; the ranks of the
other hosts fail in their collectives a moment later and their agents restart too. Between
stopping its workers and starting the next ones, every agent:

1. publishes its host's first failure of the attempt to the rendezvous store;
2. the first host's agent (its local rank 0 is global rank 0, the only checkpoint writer, now
   stopped) waits for the others' failures, names the cause, makes sure its latest complete
   checkpoint is in `checkpoint_s3_uri`, and publishes the cause, that step and the port of a
   fresh store for the next attempt's workers (the old store still holds the last attempt's
   keys: gloo's addresses, the init barrier's counters);
3. every other agent waits for that and brings the checkpoint down; every agent logs
   `restart 1 of N after: <cause>` and adds it to the host's restart log and status file.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpjob_runtime import checkpoints
from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.shared import contract, failure, phases

if TYPE_CHECKING:  # pragma: no cover
    from torch.distributed import Store

log = logging.getLogger("ddpjob_runtime.job.restarts")

HOST_ENV = "SM_CURRENT_HOST"
# How long the first host's agent waits for the other hosts' failures before naming the cause.
REPORT_WAIT_S = 30.0
# How long the other agents wait for the first host's decision (it may upload a checkpoint).
DECISION_WAIT_S = 600.0


@dataclass(frozen=True)
class NextAttempt:
    """What the first host's agent decided for attempt `attempt`."""

    attempt: int
    cause: str
    step: int | None  # the checkpoint every rank resumes from (None: none yet)
    port: int  # the workers' store for this attempt


def _key(attempt: int, what: str) -> str:
    return f"ddpjob/attempt_{attempt}/{what}"


def local_report(record_dir: Path, host: str, attempt: int) -> dict[str, Any]:
    """This host's first failure of `attempt`, as published to the other agents."""
    first = failure.first_failure(record_dir, attempt)
    if first is None:
        return {"text": f"host {host}: no failure recorded", "consequence": True,
                "time": math.inf}  # fmt: skip
    return {"text": first.headline(host), "consequence": failure.is_consequence(first.exception),
            "time": first.time}  # fmt: skip


def choose_cause(reports: list[dict[str, Any]]) -> str:
    """The earliest failure that is not a consequence (else the earliest) among the hosts'."""
    return min(reports, key=lambda r: (r["consequence"], r["time"]))["text"]


def _gather_reports(store: Any, attempt: int, hosts: int) -> list[dict[str, Any]]:
    keys = [_key(attempt, f"failure/{i}") for i in range(hosts)]
    try:
        store.wait(keys, datetime.timedelta(seconds=REPORT_WAIT_S))
    except Exception:  # noqa: BLE001 - a host that never reports: decide with what is there
        log.warning("not every host reported its failure within %.0f s", REPORT_WAIT_S)
    return [json.loads(store.get(k)) for k in keys if store.check([k])]


def _publish_checkpoint() -> int | None:
    """The first host's latest complete checkpoint, uploaded to the checkpoint URI if missing."""
    local = checkpoints.checkpoint_dir()
    steps = checkpoints.complete_steps(local)
    uri = os.environ.get(contract.ENV_CHECKPOINT_URI)
    if steps and uri:
        checkpoints.upload_if_missing(local / checkpoints.step_dir_name(steps[-1]), uri)
    return steps[-1] if steps else None


def prepare(
    store: Store, *, attempt: int, max_restarts: int, node_rank: int, nnodes: int,
    new_store_port: Callable[[], int],
) -> NextAttempt:  # fmt: skip
    """Between attempt `attempt - 1` (failed, its workers stopped) and `attempt`; see above."""
    host = os.environ.get(HOST_ENV, f"node {node_rank}")
    record_dir = Path(os.environ.get(failure.RECORD_DIR_ENV, "."))
    report = local_report(record_dir, host, attempt - 1)
    store.set(_key(attempt - 1, f"failure/{node_rank}"), json.dumps(report))
    decision_key = _key(attempt, "decision")
    if node_rank == 0:
        cause = choose_cause(_gather_reports(store, attempt - 1, nnodes) or [report])
        decision = {"cause": cause, "step": _publish_checkpoint(), "port": new_store_port()}
        store.set(decision_key, json.dumps(decision))
    else:
        store.wait([decision_key], datetime.timedelta(seconds=DECISION_WAIT_S))
        decision = json.loads(store.get(decision_key))
        uri = os.environ.get(contract.ENV_CHECKPOINT_URI)
        if uri:
            checkpoint_restore.restore_latest(uri, checkpoints.checkpoint_dir())
        elif decision["step"] is not None:
            log.warning("no checkpoint_s3_uri: this host resumes from its own checkpoint folder")
    line = f"restart {attempt} of {max_restarts} after: {decision['cause']}"
    resume = decision["step"]
    log.warning("%s (resuming from %s)", line,
                f"checkpoint step {resume}" if resume is not None else "the start")
    failure.record_restart(record_dir, line)
    phases.write_phase(os.environ.get(phases.STATUS_FILE_ENV), "Training", message=line)
    return NextAttempt(attempt, decision["cause"], resume, int(decision["port"]))
