"""The wrapper each worker runs: `python -m ddpjob_runtime.job.worker <entry point> [args...]`.

It maps MPI's rank variables to torchrun's, runs the user's entry point as `__main__`, and
on failure records the rank's exit code and traceback for the bootstrap before exiting with
that same code. After a clean end it waits for the background checkpoint upload, so a lost
checkpoint fails the job.
"""

from __future__ import annotations

import atexit
import io
import os
import runpy
import signal
import subprocess
import sys
import traceback
from collections.abc import MutableMapping
from pathlib import Path

from ddpjob_runtime.job.entrypoint import EntryKind, entry_kind
from ddpjob_runtime.shared import contract, failure, processes, proctitle, stackdump

_EXCEPTION_CHARS = 700
# MPI launchers' names for torchrun's variables (Open MPI first, then PMI/Hydra).
_MPI_NAMES = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMI_RANK"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"),
    "LOCAL_WORLD_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"),
}


def map_mpi_variables(environ: MutableMapping[str, str]) -> None:
    """Set RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE from MPI's variables when absent."""
    for name, sources in _MPI_NAMES.items():
        found = next((environ[source] for source in sources if source in environ), None)
        if name not in environ and found is not None:
            environ[name] = found


def _record(exit_code: int, exception: str, tb: str = "") -> None:
    rank = int(os.environ.get("RANK", "0"))
    failure.record(failure.RankFailure(rank, exit_code, exception[:_EXCEPTION_CHARS], tb))


def _exit_code(exc: SystemExit) -> int:
    """What Python's own exit would be for this SystemExit (a message means 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_user_code(entry: str, args: list[str]) -> int:
    code_dir = Path.cwd()
    kind = entry_kind(code_dir, entry)
    if kind is EntryKind.COMMAND:
        path = entry if "/" in entry else f"./{entry}"
        return subprocess.call([path, *args])
    sys.argv = [entry, *args]
    if kind is EntryKind.PYTHON_MODULE:
        sys.path.insert(0, str(code_dir))
        module = entry.removesuffix(".py").replace("/", ".")  # pkg/train.py -> pkg.train
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = (code_dir / entry).resolve()
        sys.path.insert(0, str(script.parent))  # as `python train.py` would
        runpy.run_path(str(script), run_name="__main__")
    return 0


def _close_process_group() -> None:
    """Destroy the process group a script left open, before interpreter teardown does.

    Left to teardown, gloo's threads can be destroyed while still joinable and the C++ runtime
    aborts the rank ("terminate called without an active exception") after a successful run.
    """
    tdist = sys.modules.get("torch.distributed")
    if tdist is not None and tdist.is_available() and tdist.is_initialized():
        tdist.destroy_process_group()


def _user_traceback(exc: BaseException) -> str:
    """The traceback from the first frame outside this module and runpy: the user's code."""
    ours = {__file__, runpy.__file__, "<frozen runpy>"}
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _failed(exc: BaseException) -> int:
    tb = _user_traceback(exc)
    sys.stderr.write(tb)
    code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    _record(code, "".join(traceback.format_exception_only(exc)).strip(), tb)
    return code


def run(argv: list[str]) -> int:
    """Run the entry point `argv[0]` with arguments `argv[1:]`; return the exit code."""
    map_mpi_variables(os.environ)
    try:
        code = _run_user_code(argv[0], argv[1:])
    except SystemExit as exc:
        code = _exit_code(exc)
        if code:
            _record(code, f"SystemExit: {exc.code}", _user_traceback(exc))
            return code
    except BaseException as exc:  # noqa: B036 - the user's failure, whatever it is, is recorded
        return _failed(exc)
    if code:
        _record(code, f"{argv[0]} exited with code {code}")
        return code
    try:
        if (checkpoints := sys.modules.get("ddpjob_runtime.checkpoints")) is not None:
            checkpoints.flush()  # the background upload: a lost checkpoint fails the rank
        _close_process_group()
    except BaseException as exc:  # noqa: B036
        return _failed(exc)
    return 0


def _exit_before_native_teardown(code: int = 0) -> None:
    """Leave with `code`, the streams flushed, before C++ static destructors run.

    For a successful rank, the last exit step: registered before the user's code, so it runs
    after the user's atexit handlers (and after Python joined the non-daemon threads). torch's
    native teardown at exit can destroy a thread that is still joinable and abort a rank that
    had finished ("terminate called without an active exception"), failing a job that succeeded.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _whole_lines() -> None:
    """Under ddpjob's torchrun, which copies each worker's output files into the host's log a
    line at a time behind the rank (`launcher.torchrun_environment`): write stdout and stderr a
    whole line at a time (unbuffered, `print` writes its text and its newline apart, and a copy
    made between the two would split the line), and stderr into stdout's file (each file is
    copied apart: a traceback would lose its place among the rank's other lines)."""
    if contract.ENV_LOG_LINE_PREFIX not in os.environ:
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)
    os.dup2(sys.stdout.fileno(), sys.stderr.fileno())


def _identify() -> None:
    """Say in `ps` which host and rank this worker is, and dump its stacks when asked."""
    map_mpi_variables(os.environ)
    rank = int(os.environ.get("RANK", "0"))
    proctitle.set_title("worker", os.environ.get("SM_CURRENT_HOST"), f"rank {rank}")
    stackdump.register(rank)


def main() -> None:
    """Console entry of the wrapper (run by torchrun, mpirun or the bootstrap)."""
    if len(sys.argv) < 2:
        sys.exit("usage: python -m ddpjob_runtime.job.worker ENTRY_POINT [ARGS...]")
    processes.die_with_parent(signal.SIGKILL)  # no worker outlives its launcher
    _identify()
    _whole_lines()
    atexit.register(_exit_before_native_teardown)
    code = run(sys.argv[1:])
    if code == 0:
        sys.exit(0)  # normal teardown: the user's atexit handlers run
    _exit_before_native_teardown(code)  # a user's stuck thread must not keep a failed rank alive


if __name__ == "__main__":
    main()
