"""Hyperparameters: checked, JSON-encoded like the official SageMaker SDK, and decoded again.

Every value is `json.dumps`'ed (`0.01` -> `"0.01"`, `"adam"` -> `"\\"adam\\""`, `True` ->
`"true"`), so the runtime can `json.loads` it back into its type. SageMaker's limits (botocore's
service model): at most 100 entries, names up to 256 characters, values up to 2,500. Each name
also becomes an environment variable (`SM_HP_<NAME>`), so it cannot hold '=' or NUL.
The client encodes and checks (`check_user_hyperparameters`); the runtime decodes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ddpjob_runtime.shared import contract
from ddpjob_runtime.shared.errors import UserInputError

MAX_ENTRIES = contract.MAX_HYPERPARAMETERS
MAX_NAME = contract.MAX_HYPERPARAMETER_NAME
MAX_VALUE = contract.MAX_HYPERPARAMETER_VALUE


def is_reserved(name: str) -> bool:
    """Whether a hyperparameter belongs to the platform/runtime rather than to the user's script."""
    return name.startswith(contract.RESERVED_PREFIXES)


def name_problem(name: object) -> str | None:
    """Why `name` cannot be a hyperparameter name (it must become an env var), or None."""
    if not isinstance(name, str) or not name:
        return "names must be non-empty strings"
    if "=" in name or "\x00" in name:
        return "names cannot contain '=' or NUL (each becomes an environment variable SM_HP_<NAME>)"
    return None


def encode(values: Mapping[str, object]) -> dict[str, str]:
    """`{name: json.dumps(value)}`, the official SDK's `_json_encode_hyperparameters`."""
    return {str(name): json.dumps(value) for name, value in values.items()}


def decode(encoded: Mapping[str, str]) -> dict[str, Any]:
    """The inverse of `encode`; a value that is not JSON (set by another client) stays raw."""
    decoded = {}
    for name, value in encoded.items():
        try:
            decoded[name] = json.loads(value)
        except (TypeError, ValueError, RecursionError):  # nested deeper than json decodes
            decoded[name] = value
    return decoded


def check_user_hyperparameters(hyperparameters: object) -> dict[str, str]:
    """The user's hyperparameters JSON-encoded, or UserInputError naming the bad entry."""
    if hyperparameters is None:
        return {}
    if not isinstance(hyperparameters, Mapping):
        raise UserInputError(
            f"hyperparameters must be a dict of name -> value, got "
            f"{type(hyperparameters).__name__}")
    encoded: dict[str, str] = {}
    for name, value in hyperparameters.items():
        problem = name_problem(name)
        if problem:
            raise UserInputError(f"hyperparameters: {problem}, got {name!r}")
        if is_reserved(name):
            raise UserInputError(
                f"hyperparameters: {name!r} is reserved (names starting with sagemaker_ or "
                f"ddpjob_ are set by ddpjob); rename it")
        if len(name) > MAX_NAME:
            raise UserInputError(
                f"hyperparameters: name {name[:30]!r}... has {len(name)} characters; SageMaker "
                f"allows at most {MAX_NAME}")
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UserInputError(
                f"hyperparameters: the value of {name!r} cannot be JSON-encoded ({exc}); use "
                f"strings, numbers, booleans, None, or lists/dicts of them") from None
        if len(text) > MAX_VALUE:
            raise UserInputError(
                f"hyperparameters: the value of {name!r} is {len(text)} characters once "
                f"JSON-encoded; SageMaker allows at most {MAX_VALUE}")
        encoded[name] = text
    return encoded


def check_total(encoded: Mapping[str, str], user_count: int) -> None:
    """SageMaker's limit on the number of entries, counting the ones ddpjob adds."""
    if len(encoded) > MAX_ENTRIES:
        added = len(encoded) - user_count
        raise UserInputError(
            f"hyperparameters: {user_count} given plus {added} that ddpjob sets make "
            f"{len(encoded)}; SageMaker allows at most {MAX_ENTRIES}, so give at most "
            f"{MAX_ENTRIES - added}")
