"""The request a `forkrun` client sends the job's template (`ddpjob_runtime.localkit.zygote`), read
and checked: the template reads what any process of its user may send, so a request of the wrong
shape (a field of the wrong type, JSON nested past the interpreter's stack) is refused with a
reason, never used half-checked or let to end the template."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class Request:
    """What a client asked for: `python -m argv[0] argv[1:]` with `env` in `cwd`; `launcher`
    where the client asked for itself (else the client's parent is the launcher)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    launcher: int | None = None


def _strings(value: object) -> bool:
    """Whether `value` is a list of strings without NUL (each an argument, a name, a value)."""
    return isinstance(value, list) and all(isinstance(s, str) and "\0" not in s for s in value)


def request_of(message: bytes) -> Request:
    """The request `message` holds (the JSON object `forkrun.request_message` writes), its
    every field checked; ValueError saying what is wrong."""
    try:
        data = json.loads(message)
    except RecursionError:  # nested deeper than the interpreter's stack: no client writes that
        raise ValueError("nested too deeply") from None
    fields = {"argv", "env", "cwd"}
    if not isinstance(data, dict) or not fields <= data.keys() <= {*fields, "launcher"}:
        raise ValueError("not an object of argv, env, cwd (and launcher)")
    argv, env, cwd, launcher = data["argv"], data["env"], data["cwd"], data.get("launcher")
    if not (argv and _strings(argv)):
        raise ValueError("argv must be a non-empty list of strings")
    if not (isinstance(env, dict) and _strings(list(env.values()))
            and all(name and "=" not in name and "\0" not in name for name in env)):
        raise ValueError("env must map variable names to strings")
    if not _strings([cwd]):
        raise ValueError("cwd must be a string")
    if launcher is not None and (type(launcher) is not int or launcher <= 0):
        raise ValueError("launcher must be a pid")
    return Request(argv, env, cwd, launcher)
