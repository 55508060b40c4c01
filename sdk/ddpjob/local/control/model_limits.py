"""The constraints of botocore's SageMaker model that botocore itself does not check.

A boto3 client checks types, required members and minimums before sending; SageMaker's server
then checks the rest of what the service model says about each member: maximum lengths, item
and entry counts, patterns and enums. The local backend is that server, so `first_violation`
walks a request against the model and names the first member that breaks one of them, in one
line. Two of the model's constraints are SageMaker's own and stretched here on purpose: the
instance type enum also takes the local types (`local`, `local_gpu`), wherever a request names
one (InstanceType, InstancePreferences, InstanceGroups), and `file://` URIs (or an empty output
path) pass the `s3://` pattern; the local validation checks those itself.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ddpjob import backends

if TYPE_CHECKING:  # pragma: no cover
    from botocore.model import Shape

# (shape name, constraint) that local mode widens; see the module's docstring.
WIDENED = {("S3Uri", "pattern")}
# shape name -> what its enum takes besides the model's values
MORE_VALUES = {"TrainingInstanceType": backends.LOCAL.instance_types}
_PREVIEW = 40  # characters of a value shown in a message


@functools.cache
def _pattern(source: str) -> re.Pattern[str] | None:
    """SageMaker's (Java) pattern as a Python one, or None where Python cannot read it (Java's
    `\\p{...}` classes: only on Tags and a Lambda ARN, which local mode ignores)."""
    try:
        return re.compile(source)
    except re.error:
        return None


def first_violation(shape: Shape, value: object, path: str = "") -> str | None:
    """The first constraint of `shape` that `value` breaks, as one line naming the member and
    what SageMaker allows; None when it keeps them all (types are botocore's to check)."""
    return next(_violations(shape, value, path), None)


def _violations(shape: Any, value: Any, path: str) -> Iterator[str]:
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                yield from _violations(member, value[name], f"{path}.{name}".lstrip("."))
    elif kind == "list" and isinstance(value, list):
        yield from _bounds(shape, len(value), f"{path}: {len(value)} items, ")
        for index, item in enumerate(value):
            yield from _violations(shape.member, item, f"{path}[{index}]")
    elif kind == "map" and isinstance(value, dict):
        yield from _bounds(shape, len(value), f"{path}: {len(value)} entries, ")
        for key, item in value.items():
            yield from _violations(shape.key, key, f"{path} key")
            yield from _violations(shape.value, item, f"{path}[{_show(key)}]")
    elif kind == "string" and isinstance(value, str):
        yield from _string(shape, value, path)
    elif kind in ("integer", "long", "float", "double") and isinstance(value, (int, float)):
        yield from _bounds(shape, value, f"{path} {value}: ")


def _bounds(shape: Any, size: float, above: str, below: str | None = None) -> Iterator[str]:
    """The model's max and min of a count, length or number; `above` (`below`) heads the line."""
    low, high = shape.metadata.get("min"), shape.metadata.get("max")
    if high is not None and size > high:
        yield f"{above}SageMaker allows at most {high}"
    if low is not None and size < low:
        yield f"{below or above}SageMaker needs at least {low}"


def _string(shape: Any, value: str, path: str) -> Iterator[str]:
    if "\x00" in value:
        yield f"{path} {_show(value)}: contains a NUL character, which no SageMaker member allows"
    yield from _bounds(shape, len(value), f"{path} {_show(value)}: {len(value)} characters, ",
                       f"{path}: {len(value)} characters, ")
    values = [*MORE_VALUES.get(shape.name, ()), *shape.enum]
    if shape.enum and value not in values:
        allowed = ", ".join(values[:12]) + (", ..." if len(values) > 12 else "")
        yield f"{path} {_show(value)}: must be one of {allowed}"
    source = shape.metadata.get("pattern")
    if source is not None and (shape.name, "pattern") not in WIDENED:
        pattern = _pattern(source)
        if pattern is not None and not pattern.fullmatch(value):
            yield f"{path} {_show(value)}: must match SageMaker's pattern {source}"


def _show(value: Any) -> str:
    """`value` as a short quoted preview (long values, e.g. a 300 kB one, are cut)."""
    text = repr(value)
    return text if len(text) <= _PREVIEW else f"{text[:_PREVIEW]}...'"
