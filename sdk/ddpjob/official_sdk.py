"""The official SageMaker SDK, imported lazily and quietly, only where its data is needed."""

from __future__ import annotations

import importlib
import logging
import warnings
from types import ModuleType

from ddpjob.errors import UserInputError

INSTALL = "pip install 'sagemaker>=2.200,<3'"


def module(name: str, needed_for: str) -> ModuleType:
    """`sagemaker.<name>`, or one-line UserInputError saying what needs it and how to install."""
    config_logger = logging.getLogger("sagemaker.config")
    if config_logger.level == logging.NOTSET:  # its "not applying SDK defaults" lines at import
        config_logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():  # the SDK's v2 deprecation notice is not for our users
            warnings.simplefilter("ignore")
            return importlib.import_module(f"sagemaker.{name}")
    except ImportError:
        raise UserInputError(f"{needed_for} needs the official SageMaker SDK: {INSTALL}"
                             ) from None
