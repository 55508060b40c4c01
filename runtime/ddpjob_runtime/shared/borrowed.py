"""What the runtime borrows from other projects' internals, and whether it is still there.

A `Hook` is one feature built on private members of torch or CPython (`torch_hooks`,
`cpython_hooks`): each `Member` says how to find its target and checks that it still has the
shape the feature relies on (it exists, takes the parameters the feature passes or overrides,
is looked up where the feature replaces it). `usable(hooks)` checks them once and logs one
line per hook whose targets moved, naming the version and the member; its caller then runs
the plain behaviour instead of that feature. `problems(hooks)` is the canary's list.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger("ddpjob_runtime.shared.borrowed")


@dataclass(frozen=True)
class Member:
    """One borrowed member: `name` as printed, `problem()` None while it fits, else why not."""

    name: str
    problem: Callable[[], str | None]


@dataclass(frozen=True)
class Hook:
    """One feature on borrowed members; `without` says what runs where they are missing."""

    name: str
    members: tuple[Member, ...]
    without: str


@dataclass(frozen=True)
class Problem:
    """A member of `hook` that moved: `reason` names what changed."""

    hook: str
    member: str
    reason: str

    def __str__(self) -> str:
        return f"{self.member} {self.reason} (used by: {self.hook})"


def find(path: str) -> object:
    """The object at `path`, "module:Attr.attr" (ImportError, AttributeError if missing)."""
    module, _, attributes = path.partition(":")
    found: object = importlib.import_module(module)
    for name in filter(None, attributes.split(".")):
        found = getattr(found, name)
    return found


def _missing(path: str) -> str | None:
    try:
        find(path)
    except (ImportError, AttributeError) as exc:
        return f"is missing ({exc})"
    return None


def exists(path: str) -> Member:
    """The member at `path` exists."""
    return Member(path, lambda: _missing(path))


def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in [*parts, text[start:]] if p.strip()]


def parameters(function: object) -> list[tuple[str, bool]]:
    """`(name, has a default)` of each parameter of `function` after `self` (a pybind11
    function's, which `inspect` cannot read, from the signature line of its docstring)."""
    try:
        found = [(p.name, p.default is not p.empty)
                 for p in inspect.signature(function).parameters.values()]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        line = (getattr(function, "__doc__", None) or "").lstrip().split("\n", 1)[0]
        match = re.fullmatch(r"\w+\((.*)\)(?:\s*->.*)?", line)
        if match is None:
            raise ValueError("its signature cannot be read") from None
        found = [(p.split(":")[0].split("=")[0].strip(), "=" in p)
                 for p in _split_top_level(match.group(1))]
    return found[1:] if found[:1] and found[0][0] == "self" else found


def _signature_problem(path: str, ours: tuple[str, ...], overridden: bool) -> str | None:
    try:
        theirs = parameters(find(path))
    except (ImportError, AttributeError) as exc:
        return f"is missing ({exc})"
    except ValueError as exc:
        return str(exc)
    names = tuple(name for name, _ in theirs)
    # An override is called with torch's arguments: the same parameters. A call passes ours:
    # theirs start with them, and the rest have defaults.
    fits = names == ours if overridden else (
        names[:len(ours)] == ours and all(default for _, default in theirs[len(ours):]))
    return None if fits else f"takes ({', '.join(names)}), not ({', '.join(ours)})"


def called(path: str, *params: str) -> Member:
    """The function at `path` exists and may be called with `params` (positionally)."""
    return Member(path, lambda: _signature_problem(path, params, overridden=False))


def overridden(path: str, *params: str) -> Member:
    """The method at `path` exists with exactly `params` (after self): an override fits."""
    return Member(path, lambda: _signature_problem(path, params, overridden=True))


def _sets_attribute(path: str, name: str) -> str | None:
    try:
        cls = find(path)
    except (ImportError, AttributeError) as exc:
        return f"is missing ({exc})"
    assignment = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]+)?=")
    for klass in inspect.getmro(cls):  # type: ignore[arg-type]
        init = vars(klass).get("__init__")
        try:
            if init is not None and assignment.search(inspect.getsource(init)):
                return None
        except (OSError, TypeError):  # no source (a C class): not set in Python
            continue
    return "is not set by its constructor"


def instance_attribute(path: str, name: str) -> Member:
    """Instances of the class at `path` get attribute `name` from its constructor."""
    return Member(f"{path}().{name}", lambda: _sets_attribute(path, name))


def _looks_up(path: str, name: str) -> str | None:
    try:
        function = find(path)
    except (ImportError, AttributeError) as exc:
        return f"is missing ({exc})"
    code = getattr(function, "__code__", None)
    if code is None or name not in code.co_names:
        return f"no longer looks up the global {name} (replacing it would change nothing)"
    return None


def looked_up(path: str, name: str) -> Member:
    """The function at `path` reads the module global `name` when called (so replacing the
    global replaces what it uses)."""
    return Member(f"{path} -> {name}", lambda: _looks_up(path, name))


def problems(hooks: Iterable[Hook]) -> list[Problem]:
    """Every member of `hooks` that does not fit any more."""
    found = []
    for hook in hooks:
        for member in hook.members:
            reason = member.problem()
            if reason is not None:
                found.append(Problem(hook.name, member.name, reason))
    return found


def usable(hooks: Iterable[Hook], version: str) -> set[str]:
    """The names of the hooks whose members all fit; one warning per other hook, naming
    `version` (the lender's: "torch 2.13.0"), its first moved member and what runs instead."""
    ok = set()
    for hook in hooks:
        moved = problems([hook])
        if moved:
            log.warning("%s: %s: %s instead", version, moved[0], hook.without)
        else:
            ok.add(hook.name)
    return ok
