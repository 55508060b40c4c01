"""Optional dependencies: what needs them, and the one line that says what to install."""

from __future__ import annotations

import importlib.util

from ddpjob.errors import UserInputError

#: pip extra -> what it installs, for the error message.
LOCAL_EXTRA = "ddpjob[local]"
SAGEMAKER_EXTRA = "ddpjob[sagemaker]"
TUNE_EXTRA = "ddpjob[tune]"


def require(module: str, extra: str, purpose: str) -> None:
    """UserInputError when `module` is not installed (found without importing it)."""
    if importlib.util.find_spec(module) is None:
        raise UserInputError(f"{purpose} needs {module}, which is not installed: "
                             f"pip install '{extra}' (or pip install {module})")


def require_torch() -> None:
    """Local jobs run torchrun on this machine: torch must be installed here."""
    require("torch", LOCAL_EXTRA, "a local training job")


def require_tune(purpose: str) -> None:
    """Local tuning jobs run Bayesian and Hyperband through Optuna: the `tune` extra."""
    if importlib.util.find_spec("optuna") is None:
        raise UserInputError(f"{purpose} needs the `tune` extra: pip install '{TUNE_EXTRA}'")
