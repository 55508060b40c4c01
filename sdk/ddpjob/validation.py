"""Checks of estimator arguments: each returns the value (normalised) or raises one-line
UserInputError naming the argument and what is allowed. Pure functions, no I/O."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.shared import contract
from ddpjob_runtime.shared.fsutil import container_path

from ddpjob.errors import UserInputError

MAX_ENVIRONMENT = 100
#: The largest number an `integer` member of SageMaker's model holds (32 bits).
MAX_INTEGER = 2**31 - 1
_ENV_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$")


def positive_int(value: object, argument: str, *, low: int = 1, high: int | None = None) -> int:
    """An int in [low, high] (bool is not an int here); never above MAX_INTEGER."""
    top = MAX_INTEGER if high is None else min(high, MAX_INTEGER)
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if number is not None and low <= number <= top:
        return number
    bounded = high is not None or (number is not None and number > top)
    allowed = f"between {low} and {top}" if bounded else f">= {low}"
    raise UserInputError(f"{argument} must be an integer {allowed}, got {shown(value)}")


def optional_int(value: object, argument: str, *, low: int = 1, high: int | None = None
                 ) -> int | None:
    return None if value is None else positive_int(value, argument, low=low, high=high)


def seconds(value: object, argument: str) -> float:
    """A number of seconds >= 0 that a float holds (bool is not a number here; an integer too
    large for a float, infinity and NaN are refused, not left to overflow later)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number) and number >= 0:
            return number
    raise UserInputError(f"{argument} must be a finite number of seconds >= 0, "
                         f"got {shown(value)}")


def shown(value: object) -> str:
    """`repr(value)` for a message; an integer too long to read (or to print: Python refuses
    over 4300 digits) as its number of digits."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"an integer of {int(math.log10(abs(value))) + 1} digits"
    return repr(value)


def optional_str(value: object, argument: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise UserInputError(f"{argument} must be a non-empty string or None, got {value!r}")
    return value


def optional_bool(value: object, argument: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise UserInputError(f"{argument} must be True, False or None, got {value!r}")
    return value


def string_list(value: object, argument: str) -> list[str] | None:
    """None or a non-empty list of strings (`[""]`, a notebook's placeholder, is passed on as
    the official SDK passes it: SageMaker answers for it)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value or not all(
        isinstance(item, str) for item in value
    ):
        raise UserInputError(f"{argument} must be a list of strings, got {value!r}")
    return list(value)


def environment(value: object) -> dict[str, str]:
    """Environment variables for every host: names, values, count and reserved prefixes."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UserInputError(f"environment must be a dict of NAME -> string, got "
                             f"{type(value).__name__}")
    if len(value) > MAX_ENVIRONMENT:
        raise UserInputError(f"environment: {len(value)} variables given; SageMaker allows at "
                             f"most {MAX_ENVIRONMENT}")
    for name, text in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise UserInputError(f"environment: {name!r} is not a variable name (letters, "
                                 f"digits and '_', not starting with a digit)")
        if name.startswith(contract.RESERVED_ENV_PREFIXES):
            raise UserInputError(
                f"environment: {name!r} is reserved (SM_* and DDPJOB_* are set by SageMaker "
                f"and ddpjob on every host); use another name, or the estimator argument "
                f"that sets it (e.g. output_path, checkpoint_local_path)")
        if not isinstance(text, str) or len(text) > 512:
            raise UserInputError(f"environment[{name!r}] must be a string of at most 512 "
                                 f"characters, got {text!r:.60}")
    return dict(value)


def tags(value: object) -> list[dict[str, str]]:
    """`[{'Key': ..., 'Value': ...}]`, also from a dict; SageMaker's limits."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        value = [{"Key": key, "Value": text} for key, text in value.items()]
    if not isinstance(value, (list, tuple)):
        raise UserInputError("tags must be a list of {'Key': ..., 'Value': ...} or a dict")
    if len(value) > 50:
        raise UserInputError(f"tags: {len(value)} given; SageMaker allows at most 50")
    for tag in value:
        if not (isinstance(tag, Mapping) and set(tag) == {"Key", "Value"}
                and isinstance(tag["Key"], str) and 1 <= len(tag["Key"]) <= 128
                and isinstance(tag["Value"], str) and len(tag["Value"]) <= 256):
            raise UserInputError(f"tags: {tag!r} must be {{'Key': <1-128 chars>, 'Value': "
                                 f"<up to 256 chars>}}")
    return [dict(tag) for tag in value]


def request_dict(value: object, argument: str) -> dict[str, Any] | None:
    """A request member given as a dict, or as an official SDK object (`_to_request_dict()`),
    e.g. `TensorBoardOutputConfig`, `ProfilerConfig`, `DebuggerHookConfig`, `InstanceGroup`."""
    if value is None:
        return None
    to_request = getattr(value, "_to_request_dict", None)
    if callable(to_request):
        value = to_request()
    if not isinstance(value, Mapping):
        raise UserInputError(f"{argument} must be the official SDK's object or a dict in the "
                             f"CreateTrainingJob shape, got {type(value).__name__}")
    return dict(value)


def metric_definitions(value: object) -> list[dict[str, str]] | None:
    """`[{'Name': ..., 'Regex': ...}]`, each regex compiled once to catch typos now."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise UserInputError("metric_definitions must be a list of {'Name': ..., 'Regex': ...}")
    for item in value:
        if not (isinstance(item, Mapping) and set(item) == {"Name", "Regex"}
                and all(isinstance(item[key], str) and item[key] for key in item)):
            raise UserInputError(f"metric_definitions: {item!r} must be {{'Name': str, "
                                 f"'Regex': str}}")
        try:
            re.compile(item["Regex"])
        except re.error as error:
            raise UserInputError(f"metric_definitions: {item['Name']!r} has an invalid regex "
                                 f"{item['Regex']!r} ({error})") from None
    return [dict(item) for item in value]


def checkpoint_local_path(value: object) -> str | None:
    """A folder below /opt/ml, absolute, without '..' (default /opt/ml/checkpoints): each local
    host has its own /opt/ml, so a path outside it would write outside the job; the same rule
    for SageMaker keeps the estimator portable. A relative path is refused (guessing what it is
    relative to would differ between backends). "" is no path: the official SDK sends none for
    it."""
    if value == "":
        return None
    return _container_path(optional_str(value, "checkpoint_local_path"), "checkpoint_local_path")


def tensorboard_output_config(value: object) -> dict[str, Any] | None:
    """`request_dict`, with its LocalPath a folder below /opt/ml (as `checkpoint_local_path`)."""
    config = request_dict(value, "tensorboard_output_config")
    if config and config.get("LocalPath") is not None:
        _container_path(config["LocalPath"], "tensorboard_output_config LocalPath")
    return config


def _container_path(value: Any, argument: str) -> Any:
    if value is not None:
        container_path(value, argument)
    return value
