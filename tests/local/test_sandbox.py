"""`ddpjob.local.isolation.sandbox`: a host's own mount namespace, with real mounts, as root and
as an unprivileged user; its decisions (the switch, the hosts file, bad input)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
from ddpjob.local.isolation import capabilities, sandbox

from tests.local.conftest import machine_state

# Each check prints `name=ok` or `name=refused: <the error>`.
SCRIPT = r"""
check() { if out=$(eval "$2" 2>&1); then echo "$1=ok"; else echo "$1=refused: $out"; fi; }
echo "pid=$$"
echo "cwd=$(pwd)"
check write_root 'echo made > /opt/ml/made-inside'
check write_view 'echo x > /opt/ml/input/data/ch/f'
check chmod_view 'chmod 666 /opt/ml/input/data/ch/f'
check chmod_staged "chmod 666 $STAGED/f"
check write_read_only "touch $JOBS/x"
check write_writable "touch $JOBS/hosts/x"
check write_opt 'touch /opt/x'
echo "view=$(cat /opt/ml/input/data/ch/f)"
echo "hosts=$(grep -c algo- /etc/hosts) $(grep algo-2 /etc/hosts)"
echo "opt=$(ls -A /opt | tr '\n' ' ')"
echo "bounding=$(awk '/^CapBnd/ {print $2}' /proc/self/status)"
check remount 'mount -o remount,bind,rw /opt/ml/input/data/ch'
check unmount 'umount -l /opt/ml/input/data/ch'
"""
EROFS = "Read-only file system"


def _namespaces() -> None:
    if sandbox.available() is not None:
        pytest.skip(f"no host namespaces here: {sandbox.available()}")


def _layout(base: Path, owner: int) -> dict[str, Path]:
    """A host root, a staged channel (read-only files), a job tree with a writable part."""
    paths = {"root": base / "root", "staged": base / "staged", "jobs": base / "jobs",
             "hosts_file": base / "hosts"}
    (paths["root"] / "input" / "data" / "ch").mkdir(parents=True)
    paths["staged"].mkdir()
    (paths["staged"] / "f").write_text("original\n")
    (paths["staged"] / "f").chmod(0o444)
    (paths["jobs"] / "hosts").mkdir(parents=True)
    paths["hosts_file"].write_text(sandbox.hosts_file_text({"algo-1": "127.0.0.1",
                                                            "algo-2": "127.0.0.2"}))
    for path in [base, *base.rglob("*")]:
        os.lchown(path, owner, owner)
    base.chmod(0o755)
    return paths


def _run(paths: dict[str, Path], python: str, user: int | None = None,
         give_up: frozenset[int] | None = None) -> tuple[int, dict]:
    """Run SCRIPT in a sandbox (as `user`) that gives up `give_up`, by default what a host
    with a staged channel does."""
    if give_up is None:
        give_up = capabilities.given_up(root=(user or os.geteuid()) == 0, namespaces=True,
                                        staged=True)
    command = sandbox.wrap(
        ["sh", "-c", SCRIPT], root=paths["root"], hosts_file=paths["hosts_file"],
        read_only=[paths["jobs"], paths["staged"]], writable=[paths["jobs"] / "hosts"],
        views={paths["root"] / "input" / "data" / "ch": paths["staged"]},
        give_up=give_up,
    )  # fmt: skip
    command[0] = python
    env = {"PATH": "/usr/bin:/bin", "STAGED": str(paths["staged"]), "JOBS": str(paths["jobs"])}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd="/", preexec_fn=(lambda: os.setuid(user)) if user
                            else None)  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return proc.pid, dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _check(pid: int, seen: dict, paths: dict[str, Path]) -> None:
    assert seen["pid"] == str(pid)  # the host's command is the process the supervisor started
    assert seen["cwd"] == "/opt/ml"
    assert seen["write_root"] == "ok"
    assert (paths["root"] / "made-inside").read_text() == "made\n"  # /opt/ml is the host root
    for refused in ("write_view", "chmod_view", "chmod_staged", "write_read_only", "write_opt"):
        assert seen[refused].startswith("refused") and EROFS in seen[refused], refused
    assert seen["write_writable"] == "ok"
    assert seen["remount"].startswith("refused") and seen["unmount"].startswith("refused")
    assert seen["view"] == "original"
    assert seen["hosts"] == "2 127.0.0.2 algo-2"
    assert (paths["staged"] / "f").read_text() == "original\n"
    assert (paths["staged"] / "f").stat().st_mode & 0o777 == 0o444
    assert not (paths["jobs"] / "x").exists()


def test_a_host_as_root_sees_its_root_as_opt_ml_and_cannot_change_what_is_shared(
        tmp_path: Path) -> None:
    _namespaces()
    if os.geteuid() != 0:
        pytest.skip("needs root")
    before = machine_state()
    paths = _layout(tmp_path / "ns", 0)
    pid, seen = _run(paths, shutil.which("python3") or "python3")
    _check(pid, seen, paths)
    opt = sorted(p.name for p in Path("/opt").iterdir())
    assert seen["opt"].split() == sorted([*opt, "ml"])  # the machine's /opt, plus ml inside only
    assert not int(seen["bounding"], 16) >> capabilities.CAP_SYS_ADMIN & 1  # what it gave up
    assert machine_state() == before


def test_an_unprivileged_host_gets_the_same_through_a_user_namespace(tmp_path: Path) -> None:
    _namespaces()
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    python = "/usr/bin/python3"
    nobody = pwd.getpwnam("nobody").pw_uid
    probe = subprocess.run([python, "-I", sandbox.__file__, "--probe"], capture_output=True,
                           text=True, preexec_fn=lambda: os.setuid(nobody), check=False)
    if probe.returncode != 0:
        pytest.skip(f"unprivileged user namespaces unavailable: {probe.stderr.strip()}")
    base = Path("/tmp") / f"ddpjob-sandbox-{os.getpid()}"
    try:
        before = machine_state()
        paths = _layout(base, nobody)
        pid, seen = _run(paths, python, user=nobody)
        _check(pid, seen, paths)
        assert machine_state() == before
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_switch_turns_namespaces_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("0", "off", "False"):
        monkeypatch.setenv(sandbox.SWITCH_ENV, value)
        assert sandbox.available() == f"{sandbox.SWITCH_ENV}={value} turns them off"


def test_the_hosts_file_keeps_the_machine_lines_but_the_job_hosts(tmp_path: Path) -> None:
    machine = tmp_path / "hosts"
    machine.write_text("127.0.0.1 localhost\n10.0.0.5 this-machine\n10.0.0.7 algo-2 other\n")
    text = sandbox.hosts_file_text({"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}, machine)
    assert text.splitlines() == ["127.0.0.1 localhost", "10.0.0.5 this-machine",
                                 "# the hosts of this ddpjob job", "127.0.0.1 algo-1",
                                 "127.0.0.2 algo-2"]  # a machine's own algo-2 would win


def test_outside_a_namespace_no_root_is_opt_ml(tmp_path: Path) -> None:
    assert not sandbox.inside(tmp_path)


def test_a_root_host_that_gave_up_nothing_could_remount_its_channel(tmp_path: Path) -> None:
    """The check that a root host's refusals above come from the capability it gave up."""
    _namespaces()
    if os.geteuid() != 0:
        pytest.skip("needs root")
    _, seen = _run(_layout(tmp_path / "ns", 0), shutil.which("python3") or "python3",
                   give_up=frozenset())
    assert (seen["remount"], seen["unmount"]) == ("ok", "ok")
    assert int(seen["bounding"], 16) >> capabilities.CAP_SYS_ADMIN & 1


def test_a_capability_that_is_no_number_is_refused_with_one_line(tmp_path: Path) -> None:
    command = sandbox.wrap(["true"], root=tmp_path, read_only=[], hosts_file=tmp_path,
                           give_up=["sys_admin"])  # type: ignore[list-item]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == ("sandbox.py: --give-up 'sys_admin': a capability's "
                                            "number (0 to 63) is allowed")


@pytest.mark.parametrize(("change", "expected"), [
    ({"root": "/no/such/root"}, "root '/no/such/root' must be an existing absolute path"),
    ({"read_only": ["relative/path"]}, "read-only path 'relative/path' must be an existing"),
    ({"command": ["/no/such/program"]}, "cannot run /no/such/program: No such file"),
])
def test_what_cannot_be_set_up_fails_the_host_with_one_line(
        tmp_path: Path, change: dict, expected: str) -> None:
    _namespaces()
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    args = {"root": root, "read_only": [], "command": ["true"]} | change
    command = sandbox.wrap(args.pop("command"), hosts_file=tmp_path / "hosts", **args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == sandbox.SETUP_FAILED
    assert len(done.stderr.splitlines()) == 1 and expected in done.stderr, done.stderr
    if Path(args["root"]).exists():  # the reason the supervisor gives for the failed host
        assert expected in (root / "output" / "failure").read_text()
