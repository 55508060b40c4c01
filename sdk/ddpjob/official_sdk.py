"""The official SageMaker SDK, imported lazily and quietly, only where its data is needed."""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from collections.abc import Iterator
from types import ModuleType

from ddpjob.errors import UserInputError

INSTALL = "pip install 'sagemaker>=2.200,<3'"


#: Loggers the SDK writes to while it is imported: its config file search (INFO) and its v2
#: deprecation notice, which is about the SDK's own API, not ours.
_IMPORT_LOGGERS = ("sagemaker.config", "sagemaker.deprecations")


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _IMPORT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def module(name: str, needed_for: str) -> ModuleType:
    """`sagemaker.<name>`, or one-line UserInputError saying what needs it and how to install."""
    try:
        with _quiet_import():
            return importlib.import_module(f"sagemaker.{name}")
    except ImportError:
        raise UserInputError(f"{needed_for} needs the official SageMaker SDK: {INSTALL}"
                             ) from None
