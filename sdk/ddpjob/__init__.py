"""ddpjob: run PyTorch DistributedDataParallel training jobs locally or on SageMaker.

Names are imported lazily so that `import ddpjob` stays fast (and never imports torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Estimator": "ddpjob.estimator",
    "HuggingFace": "ddpjob.huggingface",
    "Interruption": "ddpjob.local.base.interruptions",
    "PyTorch": "ddpjob.pytorch",
    "TrainingInput": "ddpjob.training_input",
    "TrainingJobAnalytics": "ddpjob.analytics",
    "LocalSession": "ddpjob.local.session",
    "Session": "ddpjob.sagemaker.session",
    "get_execution_role": "ddpjob.sagemaker.session",
    "HyperparameterTuner": "ddpjob.tuning.tuner",
    "HyperparameterTuningJobAnalytics": "ddpjob.tuning.analytics",
    "IntegerParameter": "ddpjob.tuning.parameters",
    "ContinuousParameter": "ddpjob.tuning.parameters",
    "CategoricalParameter": "ddpjob.tuning.parameters",
}

__all__ = ["CategoricalParameter", "ContinuousParameter", "Estimator", "HuggingFace",
           "HyperparameterTuner", "HyperparameterTuningJobAnalytics", "IntegerParameter",
           "Interruption", "LocalSession", "PyTorch", "Session", "TrainingInput",
           "TrainingJobAnalytics", "get_execution_role"]

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.analytics import TrainingJobAnalytics
    from ddpjob.estimator import Estimator
    from ddpjob.huggingface import HuggingFace
    from ddpjob.local.base.interruptions import Interruption
    from ddpjob.local.session import LocalSession
    from ddpjob.pytorch import PyTorch
    from ddpjob.sagemaker.session import Session, get_execution_role
    from ddpjob.training_input import TrainingInput
    from ddpjob.tuning.analytics import HyperparameterTuningJobAnalytics
    from ddpjob.tuning.parameters import CategoricalParameter, ContinuousParameter, IntegerParameter
    from ddpjob.tuning.tuner import HyperparameterTuner


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ddpjob' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
