"""The official SageMaker SDK, v2 or v3, found where it is installed without importing it.

ddpjob needs two things of it: its registry of SageMaker's containers (`image_uri_config/*.json`:
v2 keeps it in `sagemaker/`, v3 in `sagemaker/core/`, the `sagemaker-core` distribution) and, for
the rare cases that ddpjob does not rebuild itself, a function of its `image_uris` or `fw_utils`
(`sagemaker.<name>` in v2, `sagemaker.core.<name>` in v3, with the same signatures). The registry
is read straight from the package's files: importing the SDK takes seconds (v3's
`sagemaker.core.image_uris` alone, about 2.7 s). A module is imported only when it is asked for,
lazily and quietly. The SDK is an optional dependency (`pip install 'ddpjob[sagemaker]'`), so
that installing ddpjob never replaces a user's major of it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ddpjob.errors import UserInputError
from ddpjob.extras import SAGEMAKER_EXTRA

#: (major, package of image_uris/fw_utils, folder of the registry inside `sagemaker/`); v3 first.
_LAYOUTS = ((3, "sagemaker.core", ("core", "image_uri_config")),
            (2, "sagemaker", ("image_uri_config",)))
#: Loggers the SDK writes to while it is imported: its config file search (INFO) and its v2
#: deprecation notice, which is about the SDK's own API, not ours.
_IMPORT_LOGGERS = ("sagemaker.config", "sagemaker.deprecations")


@dataclass(frozen=True)
class OfficialSdk:
    """The installed official SDK: its major, version and where its pieces are."""

    major: int  # 2 or 3
    version: str | None  # the `sagemaker` distribution's, None when it has no metadata
    package: str  # "sagemaker" (v2) or "sagemaker.core" (v3): home of image_uris and fw_utils
    registry: Path  # its image_uri_config folder

    def config(self, framework: str) -> dict[str, Any]:
        """The registry data of `framework` (e.g. "pytorch"), as `image_uris` loads it."""
        return _load(self.registry / f"{framework}.json")

    def module(self, name: str) -> ModuleType:
        """The SDK's module `name` ("image_uris", "fw_utils"), imported quietly."""
        try:
            with _quiet_import():
                return importlib.import_module(f"{self.package}.{name}")
        except ImportError as error:  # a broken install: say which, in one line
            raise UserInputError(f"the official SageMaker SDK {self.version} is installed but "
                                 f"{self.package}.{name} does not import: {error}") from None


@functools.lru_cache(maxsize=16)
def _load(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def _package_folders() -> list[str]:
    """Folders of the `sagemaker` package, found without running its `__init__`: the import
    system's own, then those its `pkgutil.extend_path` (v3) would add from `sys.path`."""
    spec = importlib.util.find_spec("sagemaker")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    extended = [os.path.join(entry, "sagemaker") for entry in sys.path if entry]
    return list(dict.fromkeys(folders + [f for f in extended if os.path.isdir(f)]))


@functools.lru_cache(maxsize=1)
def installed() -> OfficialSdk | None:
    """The official SDK of this environment (v3's layout first), or None when there is none."""
    for folder in _package_folders():
        for major, package, parts in _LAYOUTS:
            registry = Path(folder, *parts)
            if (registry / "pytorch.json").is_file():
                return OfficialSdk(major, _version(), package, registry)
    return None


def _version() -> str | None:
    try:
        return importlib.metadata.version("sagemaker")
    except importlib.metadata.PackageNotFoundError:
        return None


def require(needed_for: str) -> OfficialSdk:
    """The installed SDK, or one-line UserInputError saying what needs it and how to install."""
    sdk = installed()
    if sdk is None:
        raise UserInputError(f"{needed_for} needs the official SageMaker SDK (v2 >= 2.200 or "
                             f"v3), which is not installed: pip install '{SAGEMAKER_EXTRA}' "
                             f"(or pip install sagemaker)")
    return sdk


def module(name: str, needed_for: str) -> ModuleType:
    """The installed SDK's module `name` (v2: `sagemaker.<name>`, v3: `sagemaker.core.<name>`)."""
    return require(needed_for).module(name)


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
