"""What `ps` shows of a local job's processes: each one's role, host and rank.

Every process of a local job runs the same interpreter (most are forked from the job's
template), so their command lines alone cannot tell a host's runtime from a worker. Each role
names itself once it starts: `ddpjob-train algo-2`, `ddpjob-agent algo-2`,
`ddpjob-worker algo-2 rank 3`, `ddpjob-supervisor JOB_DIR`, `ddpjob-template FOLDER` (the
job's or the warm pool's), `ddpjob-pool-keeper POOL_FOLDER`. `setproctitle` (what Ray,
gunicorn and Celery use) writes the title; its `SPT_NOENV` keeps /proc/<pid>/environ as it was,
which tools (and the tests' check for processes left behind) read. A process forked from the
template shows the command line that the template set for it (`show`): there the title is
shown the same way.
"""

from __future__ import annotations

import ctypes
import os

PREFIX = "ddpjob-"
_PR_SET_MM, _PR_SET_MM_MAP = 35, 14
_libc = ctypes.CDLL(None, use_errno=True)


class _MMMap(ctypes.Structure):  # struct prctl_mm_map
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "start_code", "end_code", "start_data", "end_data", "start_brk", "brk", "start_stack",
        "arg_start", "arg_end", "env_start", "env_end", "auxv")] + [
        ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_int32)]


_shown: list[ctypes.Array] = []  # the buffers /proc/self/{cmdline,environ} now show


def show(argv: list[str], env: dict[str, str]) -> None:
    """Make /proc/self/cmdline and /proc/self/environ (`ps`, tools) show `argv` and `env`: a
    process forked from the template shows its own command and environment, not the
    template's (PR_SET_MM_MAP; best effort)."""
    with open("/proc/self/stat") as file:
        stat = file.read()
    fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is the 3rd field, the state
    cmdline = ctypes.create_string_buffer(b"\0".join(os.fsencode(a) for a in argv) + b"\0")
    environ = ctypes.create_string_buffer(
        b"".join(os.fsencode(f"{k}={v}") + b"\0" for k, v in env.items()) + b"\0")
    _shown[:] = [cmdline, environ]
    number = {name: int(fields[i - 3]) for name, i in (
        ("start_code", 26), ("end_code", 27), ("start_stack", 28), ("start_data", 45),
        ("end_data", 46), ("start_brk", 47))}
    mm = _MMMap(**number, exe_fd=-1)
    _libc.sbrk.restype = ctypes.c_void_p
    mm.brk = _libc.sbrk(0) or mm.start_brk
    mm.arg_start = ctypes.addressof(cmdline)
    mm.arg_end = mm.arg_start + len(cmdline.raw) - 1
    mm.env_start = ctypes.addressof(environ)
    mm.env_end = mm.env_start + len(environ.raw) - 1
    _libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0)


def title(role: str, *where: object) -> str:
    """`ddpjob-<role> <where...>`, e.g. `title("worker", "algo-2", "rank 3")`."""
    return " ".join([f"{PREFIX}{role}", *(str(part) for part in where if part not in (None, ""))])


def set_title(role: str, *where: object) -> str:
    """Name this process `title(role, *where)` in `ps` and /proc; returns the title."""
    text = title(role, *where)
    given = os.environ.get("SPT_NOENV")
    os.environ["SPT_NOENV"] = "1"  # read once, at setproctitle's setup: the environment stays
    try:
        import setproctitle  # only in the processes that name themselves (not the client)

        setproctitle.setproctitle(text)
    finally:  # not passed on to the job's processes
        if given is None:
            del os.environ["SPT_NOENV"]
        else:
            os.environ["SPT_NOENV"] = given
    if _shown:  # forked from the template: /proc shows the buffers `show` set, not argv's
        show([text], dict(os.environ))
    return text
