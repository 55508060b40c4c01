"""The official SDK's keyword arguments that are not table rows: v1 names it renames with a
warning (`RENAMED`), arguments it accepts and drops (`DROPPED`), and the ones ddpjob refuses or
drops (`reject_unknown`)."""

from __future__ import annotations

import difflib
import logging
import warnings

from ddpjob.errors import UserInputError

logger = logging.getLogger(__name__)

#: The official SDK's v1 names -> v2 names (`sagemaker.deprecations.renamed_kwargs`).
RENAMED = {
    "train_instance_count": "instance_count",
    "train_instance_type": "instance_type",
    "train_max_run": "max_run",
    "train_use_spot_instances": "use_spot_instances",
    "train_max_wait": "max_wait",
    "train_volume_size": "volume_size",
    "train_volume_kms_key": "volume_kms_key",
    "image_name": "image_uri",
}
#: Keyword arguments seen in notebooks that the official estimators accept and ignore (their
#: `**kwargs`): accepted with a warning. `job_name`/`wait`/`logs` belong to `fit()`.
DROPPED = frozenset({"job_name", "wait", "logs", "model_dir", "env", "experiment_config",
                     "image_scope", "train_volume_kms_key_id", "py_version_warning"})


def rename_v1(kwargs: dict[str, object]) -> dict[str, object]:
    """Remove the v1 names from `kwargs`; return their values under the v2 names, warning as
    the official SDK does (the v1 value wins, as there)."""
    renamed = {}
    for old, new in RENAMED.items():
        if old in kwargs:
            if new in kwargs:
                raise UserInputError(f"give {new} or its old name {old}, not both")
            renamed[new] = kwargs.pop(old)
            _warn(f"{old} has been renamed in sagemaker>=2 (ddpjob follows: use {new}).")
    return renamed


def drop_ignored(kwargs: dict[str, object]) -> None:
    """Remove the arguments the official SDK ignores, with a warning naming each."""
    for name in sorted(DROPPED & set(kwargs)):
        kwargs.pop(name)
        hint = " (pass it to fit())" if name in ("job_name", "wait", "logs") else ""
        _warn(f"{name} is not an estimator argument; ignored, as the official SDK ignores "
              f"it{hint}")


#: Official SDK arguments that ddpjob refuses (each would change what runs in a way it cannot
#: honour). Every other official argument is accepted: see `arguments`.
UNSUPPORTED_ARGUMENTS = frozenset({
    "container_entry_point", "container_arguments", "checkpoint_s3_uri_kms_key",
    "training_recipe", "recipe_overrides", "instance_placement_config", "algorithm_arn",
    "tensorflow_version",
})
#: Official SDK arguments of services ddpjob does not drive: accepted and not sent, with a
#: warning, so that a notebook's estimator call still builds (the training itself is the same).
NOT_SENT = {"rules": "SageMaker Debugger rules are not run by ddpjob jobs"}
#: Arguments that belong inside another one: refused with the fix (the official SDK drops
#: them, and the job then runs without what the user asked for).
MISPLACED = {"processes_per_host": 'it belongs in distribution: '
                                   'distribution={"processes_per_host": N}'}


def reject_unknown(kwargs: dict[str, object], known: list[str]) -> None:
    """Take what is left in `kwargs` after the parameters and the rows: an unsupported official
    argument or a near-miss of a known one (a typo) is one error; anything else is dropped
    with a warning, as the official SDK's `**kwargs` drops it silently."""
    for name in sorted(kwargs):
        if name in MISPLACED:
            raise UserInputError(f"{name} is not an estimator argument: {MISPLACED[name]}")
        if name in UNSUPPORTED_ARGUMENTS:
            raise UserInputError(f"{name} is an argument of the official SageMaker SDK that "
                                 f"is not supported by ddpjob; remove it")
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            raise UserInputError(f"unexpected argument {name!r} (did you mean {close[0]!r}?); "
                                 f"see help(ddpjob.PyTorch) for the arguments ddpjob accepts")
        kwargs.pop(name)
        why = NOT_SENT.get(name, "it is not an estimator argument")
        _warn(f"{name} ignored: {why} (the official SDK accepts and drops unknown arguments)")


def _warn(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=4)
    logger.warning(message)
