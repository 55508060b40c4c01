"""User hyperparameters: checked, then JSON-encoded exactly like the official SageMaker SDK.

Every value is `json.dumps`'ed (`0.01` -> `"0.01"`, `"adam"` -> `"\\"adam\\""`, `True` ->
`"true"`), so the runtime can `json.loads` it back into its type. SageMaker's limits (botocore's
service model): at most 100 entries, names up to 256 characters, values up to 2,500.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ddpjob.errors import UserInputError

MAX_ENTRIES, MAX_NAME, MAX_VALUE = 100, 256, 2500
RESERVED_PREFIXES = ("sagemaker_", "ddpjob_")


def encode(values: Mapping[str, Any]) -> dict[str, str]:
    """`{name: json.dumps(value)}`, the official SDK's `_json_encode_hyperparameters`."""
    return {str(name): json.dumps(value) for name, value in values.items()}


def decode(encoded: Mapping[str, str]) -> dict[str, Any]:
    """The inverse of `encode`; a value that is not JSON (set by another client) stays raw."""
    decoded = {}
    for name, value in encoded.items():
        try:
            decoded[name] = json.loads(value)
        except (TypeError, ValueError):
            decoded[name] = value
    return decoded


def check_user_hyperparameters(hyperparameters: Any) -> dict[str, str]:
    """The user's hyperparameters JSON-encoded, or UserInputError naming the bad entry."""
    if hyperparameters is None:
        return {}
    if not isinstance(hyperparameters, Mapping):
        raise UserInputError(
            f"hyperparameters must be a dict of name -> value, got "
            f"{type(hyperparameters).__name__}"
        )
    encoded: dict[str, str] = {}
    for name, value in hyperparameters.items():
        if not isinstance(name, str) or not name:
            raise UserInputError(f"hyperparameters: names must be non-empty strings, got {name!r}")
        if name.startswith(RESERVED_PREFIXES):
            raise UserInputError(
                f"hyperparameters: {name!r} is reserved (names starting with sagemaker_ or "
                f"ddpjob_ are set by ddpjob); rename it"
            )
        if len(name) > MAX_NAME:
            raise UserInputError(
                f"hyperparameters: name {name[:30]!r}... has {len(name)} characters; SageMaker "
                f"allows at most {MAX_NAME}"
            )
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UserInputError(
                f"hyperparameters: the value of {name!r} cannot be JSON-encoded ({exc}); use "
                f"strings, numbers, booleans, None, or lists/dicts of them"
            ) from None
        if len(text) > MAX_VALUE:
            raise UserInputError(
                f"hyperparameters: the value of {name!r} is {len(text)} characters once "
                f"JSON-encoded; SageMaker allows at most {MAX_VALUE}"
            )
        encoded[name] = text
    return encoded


def check_total(encoded: Mapping[str, str], user_count: int) -> None:
    """SageMaker's limit on the number of entries, counting the ones ddpjob adds."""
    if len(encoded) > MAX_ENTRIES:
        added = len(encoded) - user_count
        raise UserInputError(
            f"hyperparameters: {user_count} given plus {added} that ddpjob sets make "
            f"{len(encoded)}; SageMaker allows at most {MAX_ENTRIES}, so give at most "
            f"{MAX_ENTRIES - added}"
        )
