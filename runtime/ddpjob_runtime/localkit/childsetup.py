"""What a process the job's template forked takes of the client it was forked for
(`ddpjob_runtime.localkit.zygote`): the client's user and mount namespaces and capabilities (its own
command line and environment in /proc: `proctitle.show`)."""

from __future__ import annotations

import ctypes
import os
from errno import EINVAL

from ddpjob_runtime.shared import processes

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_CAPS_V3 = 0x20080522
_libc = ctypes.CDLL(None, use_errno=True)


class _Caps(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def enter_namespaces(peer: int) -> None:
    """Join the user and mount namespaces of process `peer` (those that are not ours)."""
    _enter(peer, "user", _CLONE_NEWUSER)
    _enter(peer, "mnt", _CLONE_NEWNS)


def _enter(pid: int, kind: str, flag: int) -> None:
    """Join the `kind` namespace of process `pid` if it is not ours."""
    theirs = f"/proc/{pid}/ns/{kind}"
    if os.stat(theirs).st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino:
        return
    fd = os.open(theirs, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, flag), f"setns {kind}")
    finally:
        os.close(fd)


def _client_capabilities(peer: int) -> dict[str, int]:
    """The client's capability sets (`CapInh`, `CapPrm`, `CapEff`, `CapBnd`) as bit masks."""
    with open(f"/proc/{peer}/status") as status:
        fields = dict(line.split(":", 1) for line in status if line.startswith("Cap"))
    return {name: int(value, 16) for name, value in fields.items()}


def take_capabilities(peer: int) -> None:
    """Hold what the client would hold had it exec'ed this (its capabilities within its
    bounding set, which may have been cut after the client's own start): what the host gave
    up as it started (`ddpjob.local.isolation.capabilities`) stays given up, and a user
    namespace leaves nothing."""
    caps = _client_capabilities(peer)
    for name in ("CapEff", "CapPrm", "CapInh"):
        caps[name] &= caps["CapBnd"]
    for cap in (c for c in range(64) if not caps["CapBnd"] >> c & 1):
        try:
            processes.drop_bounding_capability(cap)
        except OSError as exc:
            if exc.errno != EINVAL:  # EINVAL: beyond this kernel's capabilities
                raise OSError(exc.errno, f"drop capability {cap}: {exc.strerror}") from None
    header = (ctypes.c_uint32 * 2)(_CAPS_V3, 0)
    data = (_Caps * 2)()  # capabilities 0-31, then 32-63
    for half in (0, 1):
        data[half].effective, data[half].permitted, data[half].inheritable = (
            caps[name] >> (32 * half) & 0xFFFFFFFF for name in ("CapEff", "CapPrm", "CapInh"))
    _check(_libc.capset(header, data), "capset")
