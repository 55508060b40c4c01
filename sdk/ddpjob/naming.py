"""Training job names: `<base>-YYYY-MM-DD-HH-MM-SS-mmm-<random>`, at most 63 characters.

The official SDK's timestamp has millisecond resolution, so two processes submitting in the same
millisecond would get the same name; six random hex digits make automatic names unique.
"""

from __future__ import annotations

import re
import secrets
import time

from ddpjob_runtime.shared.contract import JOB_NAME_PATTERN, MAX_JOB_NAME

from ddpjob.errors import UserInputError

_UNIQUE_HEX = 6
_SUFFIX_LENGTH = len("-2026-01-01-00-00-00-000") + 1 + _UNIQUE_HEX
_IMAGE = re.compile(r"^(.+/)?([^:/]+)(:[^:]+)?$")


def timestamp(now: float | None = None) -> str:
    """UTC time with milliseconds, as the official SDK's `sagemaker_timestamp()` writes it."""
    moment = time.time() if now is None else now
    millis = int(moment * 1000) % 1000  # truncated, like the official SDK
    return time.strftime("%Y-%m-%d-%H-%M-%S-", time.gmtime(int(moment))) + f"{millis:03d}"


def base_name_from_image(image: str) -> str:
    """The repository part of an image URI: `…/ddpjob:cuda` -> `ddpjob` (official SDK)."""
    match = _IMAGE.match(image)
    return match.group(2) if match else image


def _checked(name: object, argument: str, why: str) -> str:
    if not isinstance(name, str) or not name:
        raise UserInputError(f"{argument} must be a non-empty string, got {name!r}")
    if not JOB_NAME_PATTERN.match(name):
        raise UserInputError(
            f"{argument} {name!r} is not allowed: use letters, digits and hyphens, starting and "
            f"ending with a letter or digit ({why})")
    return name


def check_base_job_name(base: object, argument: str = "base_job_name") -> str:
    """Return `base` when a job name can start with it; else raise UserInputError."""
    return _checked(base, argument, "a timestamp is appended to it")


def name_from_base(base: str, now: float | None = None) -> str:
    """`<base>-<timestamp>-<random hex>`, the base trimmed so that the name has at most 63
    characters (and ends with a letter or digit)."""
    trimmed = base[: MAX_JOB_NAME - _SUFFIX_LENGTH].rstrip("-")
    return f"{trimmed}-{timestamp(now)}-{secrets.token_hex(_UNIQUE_HEX // 2)}"


def check_job_name(name: object, argument: str = "job_name") -> str:
    """Return `name` when SageMaker accepts it as a training job name; else raise UserInputError."""
    if isinstance(name, str) and len(name) > MAX_JOB_NAME:
        raise UserInputError(
            f"{argument} {name!r} has {len(name)} characters; SageMaker allows at most "
            f"{MAX_JOB_NAME}")
    return _checked(name, argument, f"SageMaker's pattern {JOB_NAME_PATTERN.pattern}")
