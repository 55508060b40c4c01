"""The CPython internals the job's template (`ddpjob_runtime.localkit.zygote`) relies on to keep its
forked children cheap, each with the plain behaviour where this Python lacks it:

- `FINALIZERS`: `weakref.finalize._registry`, the one way to reach every finalizer, so that
  torch's operator libraries' exit finalizers (thousands of page copies per child for
  nothing) do not run when a child exits. Without it they run.
- `EXIT`: `atexit._run_exitfuncs`, to run the atexit handlers and leave with `os._exit`,
  without tearing down the preloaded modules. Without it a child exits as any interpreter
  does (`sys.exit`): slower, the same result.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import sys
import weakref

from ddpjob_runtime.shared import borrowed
from ddpjob_runtime.shared.borrowed import Hook, Member, called, exists

VERSION = f"Python {platform.python_version()}"


def _finalizer_flag() -> str | None:
    """A finalizer in the registry has a writable `atexit` flag."""
    probe = weakref.finalize(_finalizer_flag, int)
    try:
        if probe not in weakref.finalize._registry:  # type: ignore[attr-defined]
            return "does not hold the live finalizers"
        probe.atexit = False
        return None
    except (AttributeError, TypeError) as exc:
        return f"is not as it was ({exc})"
    finally:
        probe.detach()


FINALIZERS = Hook("finalizers kept from children's exits", (
    exists("weakref:finalize._registry"),
    Member("weakref:finalize._registry[...].atexit", _finalizer_flag),
), "exit finalizers run in every forked child")
EXIT = Hook("children's fast exit", (called("atexit:_run_exitfuncs"),),
            "forked children exit as interpreters do")
HOOKS = (FINALIZERS, EXIT)
_usable: set[str] = set()


def check() -> None:
    """Decide once, in the template, which hooks fit (one warning for each other one)."""
    _usable.clear()
    _usable.update(borrowed.usable(HOOKS, VERSION))


def keep_finalizers_from_exit() -> None:
    """Let no finalizer registered so far run at exit (in this process and its children)."""
    if FINALIZERS.name in _usable:
        for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
            finalizer.atexit = False


def exit_now(code: int) -> None:
    """Exit with `code` as the interpreter would, without tearing down the modules: atexit
    handlers, flushed streams, then `os._exit`."""
    if EXIT.name not in _usable:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
