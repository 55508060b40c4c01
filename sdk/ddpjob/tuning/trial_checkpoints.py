"""A tuning trial's own checkpoints, among those its tuning job's trials may share.

A tuning job gives every trial its definition's `CheckpointConfig.S3Uri` as it is (locally; AWS
does not document whether SageMaker adds the trial's name), so one folder may hold the
checkpoints of every trial. A trial's own are, in this order:

1. the complete checkpoints under `<S3Uri>/<trial name>/`: a script that keeps each trial's
   apart by `$TRAINING_JOB_NAME`, as `tuning.parity`'s warning suggests;
2. else those directly under `S3Uri` whose manifest was written while the trial ran (from its
   TrainingStartTime to its TrainingEndTime), when no other trial of the tuning job ran at the
   same time: one that did could have written them, so that case is refused, naming it.

A checkpoint a trial restored from an earlier trial's is not its own (written before it
started); a later trial may have pruned the trial's own (`checkpoints.save(keep=...)`): then
there is none, and the error says so.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddpjob_runtime.shared import storage

from ddpjob import checkpoint_store
from ddpjob.errors import UserInputError


def _seconds(moment: datetime.datetime | None, unset: float) -> float:
    return unset if moment is None else moment.timestamp()


@dataclass(frozen=True)
class TrialCheckpoints:
    """Where the trial `trial` of a tuning job left its checkpoints under `uri` (the trials'
    CheckpointConfig.S3Uri): its own folder, else its run's window of the shared one."""

    uri: str
    trial: str
    started: float
    ended: float
    alongside: tuple[str, ...] = ()  # the other trials that ran while it did

    @classmethod
    def of(cls, uri: str, trial: str,
           summaries: Sequence[Mapping[str, Any]]) -> TrialCheckpoints:
        """From the tuning job's TrainingJobSummaries (`session.tuning_job_trials`); a trial
        still running counts as running from its start on, one not started yet not at all."""
        windows = {s["TrainingJobName"]: (_seconds(s.get("TrainingStartTime"), math.inf),
                                          _seconds(s.get("TrainingEndTime"), math.inf))
                   for s in summaries}
        if trial not in windows:
            raise UserInputError(f"training job {trial} is not a trial of this tuning job")
        started, ended = windows.pop(trial)
        alongside = tuple(name for name, (start, end) in windows.items()
                          if start <= ended and started <= end)
        return cls(uri, trial, started, ended, alongside)

    @property
    def own_folder(self) -> str:
        """`<uri>/<trial>/`: where a script that keeps each trial apart saves its checkpoints."""
        return storage.as_folder(storage.join(self.uri, self.trial))

    def checkpoints(self) -> list[checkpoint_store.Checkpoint]:
        """The trial's own complete checkpoints, oldest first (UserInputError when there are
        none, or when the shared folder's cannot be told apart from another trial's)."""
        own = checkpoint_store.list_checkpoints(self.own_folder)
        if own:
            return own
        if self.alongside:
            raise UserInputError(
                f"no checkpoint under {self.own_folder}, and those under {self.uri} cannot be "
                f"told apart: trials {', '.join(self.alongside)} ran while {self.trial} did and "
                f"share that CheckpointConfig.S3Uri (keep each trial's checkpoints under its "
                f"$TRAINING_JOB_NAME, or run the trials one at a time: max_parallel_jobs=1)")
        written = [found for found in checkpoint_store.list_checkpoints(self.uri)
                   if self.started <= found.time <= self.ended]
        if not written:
            raise UserInputError(
                f"no complete checkpoint of trial {self.trial}: none under {self.own_folder}, "
                f"and none under {self.uri} written while it ran (it saved none, or a later "
                f"trial sharing the folder pruned them)")
        return written
