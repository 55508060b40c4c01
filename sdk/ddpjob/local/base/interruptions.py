"""Spot interruptions and lost hosts, rehearsed on local jobs (`docs/spot.md`).

`Interruption` is one scheduled event (`LocalSession(interruptions=[...])`, a job spec's
`interruptions:`); `check_request` refuses, before the job starts, what could never happen on
SageMaker or could never fire; `schedule` fixes the moment of each; `due` says which fires now.
Also the spot rules the supervisor and the description share: the notice's grace, MaxWait, the
billing discount. Pure and torch-free.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ddpjob import validation
from ddpjob.errors import UserInputError

#: SageMaker's notice before a reclaimed (or stopped) instance is killed: SIGTERM, 120 s, SIGKILL.
NOTICE_GRACE_S = 120.0
#: Overrides NOTICE_GRACE_S for the supervisor of every job started from this environment
#: (tests, a quick rehearsal).
GRACE_ENV = "DDPJOB_SPOT_GRACE_S"
#: The share of the on-demand price a spot job saves in `BillableTimeInSeconds` (SageMaker's
#: documentation: "up to 90%"; 70% is a typical saving, fixed so rehearsals are repeatable).
SPOT_DISCOUNT = 0.7


@dataclass(frozen=True)
class Interruption:
    """One interruption of a local job, fired during the attempt of its place in the list.

    `after_s` seconds after that attempt's training started, or at a random moment within
    `within_s = (low, high)` drawn with `seed`. With `notice` (a spot reclaim; spot jobs only):
    SIGTERM, SageMaker's 120 s grace, SIGKILL, then the job restarts on fresh hosts from its
    checkpoints. Without (`notice=False`, any job): the host `host` (default: the last one) is
    SIGKILLed, as a lost instance; the job fails, or is retried within `max_retry_attempts`.
    `host` with notice: only that host is reclaimed first (default: all at once).
    """

    after_s: float | None = None
    within_s: tuple[float, float] | None = None
    seed: int | None = None
    host: str | None = None
    notice: bool = True

    def __post_init__(self) -> None:
        if (self.after_s is None) == (self.within_s is None):
            raise UserInputError("Interruption: give exactly one of after_s (seconds after the "
                                 f"attempt's training started) or within_s, got {self}")
        if self.after_s is not None:
            _seconds("after_s", self.after_s)
        if self.within_s is not None:
            window = self.within_s
            if not isinstance(window, (tuple, list)) or len(window) != 2:
                raise UserInputError(f"Interruption: within_s must be (low, high) in seconds, "
                                     f"got {window!r}")
            low, high = (_seconds("within_s", v) for v in window)
            if not low < high:
                raise UserInputError(f"Interruption: within_s must be a window (low < high), "
                                     f"got {window!r}")
            object.__setattr__(self, "within_s", (low, high))  # a list given: hashable
        if self.seed is not None and (isinstance(self.seed, bool) or
                                      not isinstance(self.seed, int)):
            raise UserInputError(f"Interruption: seed must be an integer, got {self.seed!r}")
        if self.host is not None and not isinstance(self.host, str):
            raise UserInputError(f"Interruption: host must be a host name such as 'algo-2', "
                                 f"got {self.host!r}")
        if not isinstance(self.notice, bool):
            raise UserInputError(f"Interruption: notice must be True or False, "
                                 f"got {self.notice!r}")

    @property
    def latest_s(self) -> float:
        """The latest moment it can fire, in seconds after the attempt's training started."""
        return self.after_s if self.within_s is None else self.within_s[1]  # type: ignore[return-value]

    def moment(self) -> float:
        """When it fires (seconds after the attempt's training started)."""
        if self.within_s is None:
            return float(self.after_s)  # type: ignore[arg-type]
        return random.Random(self.seed).uniform(*self.within_s)


def _seconds(name: str, value: object) -> float:
    return validation.seconds(value, f"Interruption: {name}")


def from_spec(items: object, where: str) -> list[Interruption]:
    """The interruptions of a job spec's `interruptions:` list of mappings."""
    if not isinstance(items, list):
        raise UserInputError(f"{where}: interruptions must be a list of mappings, got {items!r}")
    names = {f.name for f in fields(Interruption)}
    found = []
    for item in items:
        if not isinstance(item, Mapping) or not set(item) <= names:
            raise UserInputError(f"{where}: each interruption is a mapping of "
                                 f"{', '.join(sorted(names))}; got {item!r}")
        found.append(Interruption(**item))
    return found


def checked(items: object) -> tuple[Interruption, ...]:
    """`LocalSession(interruptions=...)`: a sequence of Interruption."""
    if items is None:
        return ()
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or \
            not all(isinstance(i, Interruption) for i in items):
        raise UserInputError(f"interruptions must be a list of ddpjob.Interruption, "
                             f"got {items!r}")
    return tuple(items)


def is_spot(request: Mapping[str, Any]) -> bool:
    """Whether the job runs with managed spot training."""
    return bool(request.get("EnableManagedSpotTraining"))


def max_wait_s(request: Mapping[str, Any]) -> int | None:
    """StoppingCondition.MaxWaitTimeInSeconds of a spot job (None for any other)."""
    return (request.get("StoppingCondition") or {}).get("MaxWaitTimeInSeconds") \
        if is_spot(request) else None


def grace_s() -> float:
    """The notice of a reclaim: `$DDPJOB_SPOT_GRACE_S`, else SageMaker's 120 s."""
    value = os.environ.get(GRACE_ENV, "").strip()
    return float(value) if value else NOTICE_GRACE_S


def billed(training_s: float, spot: bool) -> tuple[int, int]:
    """TrainingTimeInSeconds and BillableTimeInSeconds of `training_s` seconds on the hosts:
    a spot job's bill is less the discount, and it trained at least 1 s (the official SDK
    divides by it for its savings line)."""
    if not spot:
        return int(training_s), int(training_s)
    training = max(1, int(training_s))
    return training, int(training * (1 - SPOT_DISCOUNT))


def check_host(host: str | None, hosts: Sequence[str], what: str) -> None:
    """`host` is one of the job's `hosts` (None: the default)."""
    if host is not None and host not in hosts:
        raise UserInputError(f"{what}: host {host!r} is not a host of this job; its hosts are "
                             f"{', '.join(hosts)}")


def check_request(items: Sequence[Interruption], request: Mapping[str, Any],
                  hosts: Sequence[str]) -> None:
    """Refuse a schedule that cannot fire on the job of `request` (whose hosts are `hosts`)."""
    stopping = request.get("StoppingCondition") or {}
    limits = [v for v in (stopping.get("MaxRuntimeInSeconds"), max_wait_s(request)) if v]
    for i, item in enumerate(items):
        what = f"interruptions[{i}]"
        if item.notice and not is_spot(request):
            raise UserInputError(
                f"{what}: an interruption with notice is a spot reclaim, and this job does not "
                f"use spot (use_spot_instances=True); notice=False (a lost host) applies to any "
                f"job")
        check_host(item.host, hosts, what)
        if limits and item.latest_s >= min(limits):
            raise UserInputError(
                f"{what}: it would fire {item.latest_s:g} s into the attempt's training, at or "
                f"past the job's limit ({min(limits)} s of MaxRuntimeInSeconds/"
                f"MaxWaitTimeInSeconds): it cannot fire")


def schedule(items: Sequence[Interruption], hosts: Sequence[str]) -> list[dict[str, Any]]:
    """The job's schedule as its state keeps it: for attempt i+1, when (`at_s` after that
    attempt's training started), which host and whether with notice."""
    return [{"at_s": item.moment(), "host": item.host or (None if item.notice else hosts[-1]),
             "notice": item.notice} for item in items]


def due(planned: Sequence[Mapping[str, Any]], attempt: int,
        attempt_training_s: float | None) -> Mapping[str, Any] | None:
    """The planned interruption of `attempt` (1-based) once its moment has come; None before,
    when none is planned, or while the attempt does not train yet (`attempt_training_s`)."""
    if attempt_training_s is None or attempt > len(planned):
        return None
    item = planned[attempt - 1]
    return item if attempt_training_s >= item["at_s"] else None
