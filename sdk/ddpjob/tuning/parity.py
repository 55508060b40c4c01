"""Whether a tuning job's trials run as the same estimator's or ModelTrainer's plain training
job would (pure, over requests): what no tuner checks, and what users found only by paying for
a cloud tuning job (12 threads, `../shared/research/tuning.md`).

`lost_members` compares the plain job's CreateTrainingJob request (ddpjob's estimator plans it)
with the trials' `TrainingJobDefinition`: one line per member a trial lost. `request_warnings`
reads what a CreateHyperParameterTuningJob request from any client shows alone: a v3
`ModelTrainer` definition without its drivers channel (aws/sagemaker-python-sdk#5508), spot
training without checkpoints, and one `CheckpointConfig.S3Uri` shared by every trial.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddpjob_runtime.shared import contract

from ddpjob.tuning.rules import CONFIG, DEFINITION

#: Members of the plain request a trial does not take from it: its name, its hyperparameters
#: (compared apart: `StaticHyperParameters` plus the tuned ones), the tags (the tuning job's).
_NOT_COMPARED = ("TrainingJobName", "HyperParameters", "Tags")
#: No line for these: the PyTorch estimator sets the first by default and the official tuner
#: drops it too; the tuner's metric definitions replace the estimator's.
_DROPPED_QUIETLY = ("AlgorithmSpecification.EnableSageMakerMetricsTimeSeries",
                    "AlgorithmSpecification.MetricDefinitions")
#: What a trial without the member does differently from the plain job.
_CONSEQUENCE = {
    "InputDataConfig": "its data is not under /opt/ml/input/data",
    "Environment": "its processes run without that variable",
    "CheckpointConfig": "nothing in its checkpoint folder is kept, so a spot interruption or a "
                        "retry starts it over",
    "RetryStrategy": "an internal error fails it instead of retrying it",
    "EnableManagedSpotTraining": "it runs on demand, never interrupted (and billed in full)",
    "StoppingCondition": "it stops on other limits",
    "OutputDataConfig": "its model and output go elsewhere",
    "ContentType": "its script reads the channel's content type as unset",
}
DRIVERS, CODE = "sm_drivers", "code"  # a ModelTrainer's channels (sagemaker.train.constants)
PROGRAM, SUBMIT_DIRECTORY = "sagemaker_program", "sagemaker_submit_directory"


def consequence(member: str) -> str:
    """What a trial without `member` does differently from the plain training job."""
    return _CONSEQUENCE.get(member, "the trials run without it")


def _channels(request: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c["ChannelName"]: c for c in request.get("InputDataConfig") or ()}


def _lost_channels(plain: Mapping[str, Any], trial: Mapping[str, Any]) -> list[str]:
    lines, theirs = [], _channels(trial)
    for name, channel in _channels(plain).items():
        if name not in theirs:
            lines.append(f"InputDataConfig: a trial has no channel {name!r}, which the plain "
                         f"training job has: {consequence('InputDataConfig')}/{name}")
            continue
        for key in sorted(channel):
            if theirs[name].get(key) != channel[key]:
                lines.append(f"InputDataConfig: a trial's channel {name!r} lost its {key} "
                             f"{channel[key]!r}: {consequence(key)}")
    return lines


def _lost_keys(member: str, plain: Mapping[str, Any], trial: Mapping[str, Any] | None
               ) -> list[str]:
    """One line per key of the mapping member `member` that the trial's lacks or changes."""
    trial = trial or {}
    return [f"{member}.{key}: a trial lost the plain training job's {plain[key]!r}"
            + (f" (it has {trial[key]!r})" if key in trial else "") + f": {consequence(member)}"
            for key in sorted(plain) if trial.get(key) != plain[key]
            and f"{member}.{key}" not in _DROPPED_QUIETLY]


def lost_members(plain: Mapping[str, Any], definition: Mapping[str, Any],
                 tuned: Iterable[str] = ()) -> list[str]:
    """One warning line per member of the plain job's CreateTrainingJob request `plain` that
    the trials' `definition` (HyperParameterTrainingJobDefinition) lacks or changes; the
    hyperparameters named in `tuned` are the tuner's to set."""
    lines: list[str] = []
    for member in sorted(plain):
        value, theirs = plain[member], definition.get(member)
        if member in _NOT_COMPARED or theirs == value:
            continue
        if member == "InputDataConfig":
            lines += _lost_channels(plain, definition)
        elif member in ("Environment", "AlgorithmSpecification", "StoppingCondition"):
            lines += _lost_keys(member, value, theirs)
        elif member == "ResourceConfig" and theirs is None \
                and "HyperParameterTuningResourceConfig" in definition:
            continue  # v2's other shape of it
        else:
            lines.append(f"{member}: a trial lost the plain training job's {member}: "
                         f"{consequence(member)}")
    static = definition.get("StaticHyperParameters") or {}
    skipped = set(tuned) | {contract.TUNING_OBJECTIVE}
    missing = [name for name, value in (plain.get("HyperParameters") or {}).items()
               if name not in skipped and static.get(name) != value]
    if missing:
        lines.append(f"HyperParameters: a trial lost the plain training job's "
                     f"{', '.join(sorted(missing))} (neither static nor tuned)")
    return lines


def _modeltrainer_lines(definition: Mapping[str, Any]) -> list[str]:
    """A v3 ModelTrainer's definition (its `sagemaker_program` as it is: v2 and ddpjob quote
    theirs) without the channels its plain training job carries."""
    static = definition.get("StaticHyperParameters") or {}
    program = static.get(PROGRAM)
    if not program or program.startswith('"'):
        return []
    channels, lines = _channels(definition), []
    if DRIVERS not in channels:
        lines.append(f"InputDataConfig: no {DRIVERS!r} channel, which a ModelTrainer's training "
                     f"job carries: each trial's hosts run `python {program}` instead of the "
                     f"ModelTrainer's command (torchrun for Torchrun()), one process per host "
                     f"(aws/sagemaker-python-sdk#5508 and #5610; sent since its PR #5634)")
    else:  # what the local trials showed (tests/sdk3/test_official_tuner_v3.py)
        lines.append(f"AlgorithmSpecification: the tuning API carries no ContainerEntrypoint, "
                     f"so the trials run the image's own program, which reads neither the "
                     f"{DRIVERS!r} channel nor the ModelTrainer's distribution: each host runs "
                     f"`python {program}` alone (rank 0 of 1), not the ModelTrainer's command "
                     f"(torchrun for Torchrun()) (aws/sagemaker-python-sdk#5508)")
    if CODE not in channels and SUBMIT_DIRECTORY not in static:
        lines.append(f"InputDataConfig: no {CODE!r} channel and no {SUBMIT_DIRECTORY} "
                     f"hyperparameter: the trials get none of the ModelTrainer's source code")
    return lines


def _checkpoint_lines(request: Mapping[str, Any]) -> list[str]:
    definition = request[DEFINITION]
    checkpoint = definition.get("CheckpointConfig")
    if checkpoint is None:
        return [f"CheckpointConfig: absent while EnableManagedSpotTraining is on: "
                f"{consequence('CheckpointConfig')} (aws/sagemaker-python-sdk#6500)"
                ] if definition.get("EnableManagedSpotTraining") else []
    if request[CONFIG]["ResourceLimits"].get("MaxNumberOfTrainingJobs") == 1:
        return []
    return [f"CheckpointConfig.S3Uri {checkpoint['S3Uri']} is every trial's (the tuning job "
            f"gives each the same URI): a trial starts with the checkpoints of the trials before "
            f"it and, resuming from them, continues another trial's training with its own "
            f"hyperparameters; keep each trial's checkpoints in a folder named by its "
            f"${contract.ENV_TRAINING_JOB_NAME} (a retry or a spot restart keeps the name)"]


def request_warnings(request: Mapping[str, Any]) -> list[str]:
    """What a CreateHyperParameterTuningJob request shows alone that its trials will miss or
    get wrong, one line each (none for a request with several definitions)."""
    if DEFINITION not in request:
        return []
    return _modeltrainer_lines(request[DEFINITION]) + _checkpoint_lines(request)
