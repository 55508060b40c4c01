"""`ddpjob.local.isolation.capabilities`: the one decision of what a local host gives up, and
its application to a real process started without a sandbox (the sandbox's: test_sandbox.py;
real jobs: test_staging.py, test_host_namespaces.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ddpjob.local.isolation import capabilities, sandbox
from ddpjob.local.isolation.capabilities import CAP_DAC_OVERRIDE, CAP_SETPCAP, CAP_SYS_ADMIN
from ddpjob_runtime.shared import processes

# Prints whether it could write the file $TARGET, then its bounding and effective sets.
WRITER = r"""
if (echo changed > "$TARGET") 2>/dev/null; then echo write=ok; else echo write=refused; fi
awk '/^CapBnd|^CapEff/ {print $1 $2}' /proc/self/status | tr -d '\t' | sed 's/:/=/'
"""


@pytest.mark.parametrize(("root", "namespaces", "staged", "expected"), [
    (False, False, False, set()),
    (False, False, True, set()),  # the files' 0444 mode is enough for a user without root
    (False, True, False, set()),
    (False, True, True, set()),  # its user namespace leaves it nothing after the exec
    (True, True, False, {CAP_SYS_ADMIN}),  # it must not remount what is read-only
    (True, True, True, {CAP_SYS_ADMIN}),  # the staged channels are read-only mounts
    (True, False, False, set()),  # nothing shared to write through
    (True, False, True, {CAP_DAC_OVERRIDE}),  # root writes through 0444 with it
])
def test_what_a_host_gives_up(root: bool, namespaces: bool, staged: bool,
                              expected: set[int]) -> None:
    assert capabilities.given_up(root=root, namespaces=namespaces, staged=staged) == expected


def test_held_reads_the_effective_set(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapPrm:\t0000000000000002\nCapEff:\t0000000000200100\n")
    assert [cap for cap in range(64) if sandbox.held(cap, str(status))] == [
        CAP_SETPCAP, CAP_SYS_ADMIN]
    assert not sandbox.held(CAP_SYS_ADMIN, str(tmp_path / "no-such-file"))
    (tmp_path / "no-eff").write_text("Name:\tx\nCapPrm:\t0000000000200100\n")
    assert not sandbox.held(CAP_SYS_ADMIN, str(tmp_path / "no-eff"))


def _needs_root_that_drops() -> None:
    if os.geteuid() != 0 or not sandbox.held(CAP_SETPCAP):
        pytest.skip("needs root with CAP_SETPCAP")


def _start(target: Path, caps: frozenset[int]) -> dict[str, str]:
    """Run WRITER as the supervisor starts a host without a namespace, giving up `caps`."""
    proc = subprocess.Popen(
        ["sh", "-c", WRITER], env={"PATH": "/usr/bin:/bin", "TARGET": str(target)},
        stdout=subprocess.PIPE, text=True,
        preexec_fn=capabilities.preexec(caps, processes.ends_with_this_process()),
    )  # fmt: skip
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return dict(line.split("=", 1) for line in out.splitlines())


def test_a_root_host_that_gave_up_dac_override_cannot_write_a_read_only_file(
        tmp_path: Path) -> None:
    """A staged file (0444, root's) stays unchanged for a root host with staged channels and no
    namespace; without the drop, root would write it (the check that the test can fail)."""
    _needs_root_that_drops()
    target = tmp_path / "staged"
    target.write_text("original\n")
    target.chmod(0o444)
    caps = capabilities.given_up(root=True, namespaces=False, staged=True)
    seen = _start(target, caps)
    assert seen["write"] == "refused"
    for name in ("CapBnd", "CapEff"):  # the program and anything it starts: none of it
        assert not int(seen[name], 16) >> CAP_DAC_OVERRIDE & 1, name
    assert target.read_text() == "original\n"
    assert _start(target, frozenset())["write"] == "ok"  # what root does without the drop
    assert target.read_text() == "changed\n"


def test_without_cap_setpcap_nothing_is_given_up_and_the_supervisor_says_so() -> None:
    """A root supervisor that may not drop capabilities (a container without CAP_SETPCAP)
    still starts its hosts, keeping them, with a warning (the mode alone protects)."""
    _needs_root_that_drops()
    code = ("import logging; logging.basicConfig(format='%(message)s');"
            "from ddpjob.local.isolation import capabilities as c, sandbox;"
            "print(sorted(c.droppable(frozenset({c.CAP_DAC_OVERRIDE}))), "
            "sandbox.held(c.CAP_SETPCAP))")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
        preexec_fn=capabilities.preexec({CAP_SETPCAP}, processes.ends_with_this_process()),
    )  # fmt: skip
    assert done.stdout.split() == ["[]", "False"]
    assert "without CAP_SETPCAP" in done.stderr and "[1]" in done.stderr
