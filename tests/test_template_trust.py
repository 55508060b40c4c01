"""Whom the template's socket trusts, and whom its clients trust (`ddpjob_runtime.localkit.zygote`,
`forkrun`, `ddpjob.local.base.templates`, warm pools): real templates, a real second user
(`nobody`, through `setpriv`: these tests run as root), real jobs on real warm pools."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.base import proctree
from ddpjob.local.base.templates import Template
from ddpjob.local.session import LocalSession
from ddpjob_runtime.shared import forkrun

from tests.local.conftest import (
    JOBS,
    assert_no_processes,
    local_session_at,
    log_text,
    source_tar,
    training_request,
    wait_for,
    wait_until_ended,
)

ROOT = Path(__file__).parents[1]
PYTHONPATH = os.pathsep.join([str(ROOT / "sdk"), str(ROOT / "runtime"), str(ROOT)])
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SO_SNDBUFFORCE = 32  # Linux: root may pass wmem_max, so one packet can exceed the request limit

pytestmark = pytest.mark.skipif(
    os.getuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to act as a second user")

# Serves whatever socket DDPJOB_ZYGOTE names, as another user would once the template died:
# says whether it could bind it, then what one client sent, and tells it its child exited 0.
IMPOSTOR = """\
    import json, socket, sys
    value = sys.argv[1]
    # "@name": the public abstract name templates had (anyone may bind it); else PID:PATH
    address = "\\0" + value[1:] if value.startswith("@") else value.partition(":")[2]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        server.bind(address)
    except OSError as exc:
        print(json.dumps({"bound": False, "error": str(exc)}), flush=True)
        sys.exit(0)
    server.listen()
    print(json.dumps({"bound": True}), flush=True)
    conn, _ = server.accept()
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    print(json.dumps({"received": message.decode(errors="replace"), "fds": len(fds)}),
          flush=True)
    if message:
        conn.send(b"R1")
        conn.send(b"X0")
"""

MODULE = """\
    import os, sys
    from pathlib import Path
    Path(sys.argv[1]).write_text(Path(f"/proc/{os.getppid()}/cmdline").read_text())  # who ran it
    sys.exit(7)
"""
FORKED = "ddpjob-template "  # the title of the process that forked it


@pytest.fixture
def nobodys() -> Iterator[Path]:
    """A folder of `nobody`'s (the test's own folders are root's alone), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="ddpjob-nobody-"))
    os.chown(folder, 65534, 65534)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def template(tmp_path: Path) -> Iterator[Template]:
    folder = tmp_path / "job"
    folder.mkdir(mode=0o700)
    started = Template(folder, folder / "template.log")
    started.start()
    yield started
    started.stop()
    assert_no_processes(folder)


def _code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "writes.py").write_text(textwrap.dedent(MODULE))
    return code


def _env(zygote: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": PYTHONPATH, "DDPJOB_ZYGOTE": zygote,
            "AWS_SECRET_ACCESS_KEY": SECRET, **extra}


def _impostor(zygote: str, folder: Path) -> tuple[subprocess.Popen, dict[str, Any]]:
    """`nobody` serving the socket `zygote` names (its script in `folder`); its first line
    (whether it bound it)."""
    script = folder / "impostor.py"
    script.write_text(textwrap.dedent(IMPOSTOR))
    script.chmod(0o644)
    proc = subprocess.Popen([*AS_NOBODY, sys.executable, "-I", str(script), zygote],
                            stdout=subprocess.PIPE, text=True, cwd="/")
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _heard(impostor: subprocess.Popen) -> list[dict[str, Any]]:
    """What the impostor said after its first line, once it exited (after one client, or at
    once where it could not bind); ended where no client came."""
    try:
        out, _ = impostor.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        impostor.kill()
        out, _ = impostor.communicate()
    return [json.loads(line) for line in out.splitlines()]


def test_another_user_gets_nothing_from_a_client_once_the_template_died(
    template: Template, tmp_path: Path, nobodys: Path
) -> None:
    """The template is killed (as the OOM killer would); another user then serves what
    DDPJOB_ZYGOTE names. The client sends it nothing (no environment, no stdio) and its module
    runs, exiting as it does (the other user decides nothing)."""
    zygote = template.name
    assert template.proc is not None
    template.proc.kill()
    template.proc.wait()
    impostor, first = _impostor(zygote, nobodys)
    marker = tmp_path / "marker"
    try:
        done = subprocess.run(forkrun.command("writes") + [str(marker)], cwd=_code(tmp_path),
                              env=_env(zygote), capture_output=True, text=True, timeout=120,
                              check=False)
    finally:
        heard = _heard(impostor)
    assert SECRET not in json.dumps(heard) and heard == [], heard
    assert done.returncode == 7 and marker.exists(), done.stderr  # it ran (not forked)
    assert not first["bound"], first  # the template's folder is this user's alone


def test_a_client_sends_nothing_to_a_socket_another_user_serves(
    tmp_path: Path, nobodys: Path
) -> None:
    """Where another user serves the socket DDPJOB_ZYGOTE names (pid and all: its own), the
    client checks its credentials before it sends a byte: it refuses loudly (exit 125, the
    reason on stderr and as the host's failure) and runs nothing."""
    path = nobodys / "template.sock"
    impostor, first = _impostor(f"1:{path}", nobodys)  # the pid is the client's to check
    host_root = tmp_path / "host"
    (host_root / "output").mkdir(parents=True)
    marker = tmp_path / "marker"
    try:
        done = subprocess.run(
            forkrun.command("writes") + [str(marker)], cwd=_code(tmp_path),
            env=_env(f"{impostor.pid}:{path}", SAGEMAKER_BASE_DIR=str(host_root)),
            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    finally:
        heard = _heard(impostor)
    assert first["bound"]
    assert heard == [{"received": "", "fds": 0}]  # it was connected to, and sent nothing
    assert done.returncode == forkrun.REFUSED_EXIT and not marker.exists()
    reason = f"served by pid {impostor.pid} of uid 65534"
    assert reason in done.stderr and "refused, nothing was sent" in done.stderr
    assert reason in (host_root / "output" / "failure").read_text()


def test_a_socket_served_by_another_process_than_the_named_template_is_refused(
    template: Template, tmp_path: Path
) -> None:
    """The pid is checked too: the right user but another process than the one named (a stale
    or forged DDPJOB_ZYGOTE) gets nothing, from a client or from `forkrun.fork`."""
    _, _, path = template.name.partition(":")
    forged = f"{os.getpid()}:{path}"
    marker = tmp_path / "marker"
    done = subprocess.run(forkrun.command("writes") + [str(marker)], cwd=_code(tmp_path),
                          env=_env(forged), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == forkrun.REFUSED_EXIT and not marker.exists(), done.stderr
    assert f"not by the template (pid {os.getpid()}" in done.stderr
    with pytest.raises(forkrun.UntrustedTemplateError, match="refused, nothing was sent"):
        forkrun.fork(["writes", str(marker)], _env(forged), str(_code(tmp_path)))
    with pytest.raises(forkrun.UntrustedTemplateError, match="must be PID:/PATH"):
        forkrun.fork(["writes", str(marker)], _env("@ddpjob-zygote-1-ab"), str(tmp_path))
    assert not marker.exists()


@pytest.mark.jobs  # starts a real template (no `template` fixture: a folder of its own)
def test_a_template_whose_folder_is_longer_than_a_socket_address_serves(tmp_path: Path) -> None:
    """A unix socket address holds at most 107 bytes, a home's path may not fit: the template
    binds and its clients connect through an fd of the folder."""
    folder = tmp_path / ("a-long-home-" * 12)
    folder.mkdir(mode=0o700)
    code = tmp_path / "code"
    code.mkdir()
    (code / "parent.py").write_text("import os\n"
                                    "print(open(f'/proc/{os.getppid()}/cmdline').read())\n")
    started = Template(folder, folder / "template.log")
    started.start()
    try:
        assert len(started.name) > 108
        done = subprocess.run(forkrun.command("parent"), cwd=code, env=_env(started.name),
                              capture_output=True, text=True, timeout=120, check=True)
    finally:
        started.stop()
    assert done.stdout.startswith(f"ddpjob-template {folder}"), done.stdout  # forked


def _send(template: Template, message: bytes, fd_count: int = 3) -> bytes:
    """Send `message` with `fd_count` fds (of /dev/null) to the template; its answer."""
    _, _, path = template.name.partition(":")
    fds = [os.open(os.devnull, os.O_RDWR) for _ in range(fd_count)]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            forkrun.reach(sock, path)
            sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
            socket.send_fds(sock, [message], fds)
            sock.settimeout(120)
            return sock.recv(1 << 16)
    finally:
        for fd in fds:
            os.close(fd)


def _fds(pid: int) -> tuple[int, int]:
    """How many fds `pid` holds, and how many of them are /dev/null (its stdin, and any it
    kept of what the tests send: /dev/null; a served client's stdio are pipes)."""
    links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    return len(links), links.count(os.devnull)


def _kept_none(pid: int, before: tuple[int, int]) -> None:
    """`pid` kept no fd it was sent (it closes them before it answers), and closes the
    connections it answered (just after: waited for)."""
    assert _fds(pid)[1] == before[1]
    wait_for(lambda: _fds(pid)[0] <= before[0], 60, "the template to close its connections")


GOOD = {"argv": ["writes", "x"], "env": {}, "cwd": "/"}
BAD_REQUESTS = [
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "nested too deeply", id="nested"),
    pytest.param(b"{not json", "a bad request", id="not-json"),
    pytest.param(b"\xff\xfe", "a bad request", id="not-utf8"),
    pytest.param(b"[]", "not an object", id="not-an-object"),
    pytest.param(json.dumps({**GOOD, "argv": "writes"}).encode(), "argv", id="argv-str"),
    pytest.param(json.dumps({**GOOD, "argv": ["writes", 1]}).encode(), "argv", id="argv-int"),
    pytest.param(json.dumps({**GOOD, "argv": []}).encode(), "argv", id="argv-empty"),
    pytest.param(json.dumps({**GOOD, "env": {"A": 1}}).encode(), "env", id="env-int"),
    pytest.param(json.dumps({**GOOD, "env": {"A=B": "c"}}).encode(), "env", id="env-name"),
    pytest.param(json.dumps({**GOOD, "env": ["A"]}).encode(), "env", id="env-list"),
    pytest.param(json.dumps({**GOOD, "cwd": 3}).encode(), "cwd", id="cwd-fd"),
    pytest.param(json.dumps({**GOOD, "cwd": "/\0"}).encode(), "cwd", id="cwd-nul"),
    pytest.param(json.dumps({**GOOD, "launcher": True}).encode(), "launcher", id="launcher"),
    pytest.param(json.dumps({**GOOD, "more": 1}).encode(), "not an object", id="extra-field"),
    pytest.param(b" " * ((1 << 20) + 1), "at most", id="too-big"),
]  # fmt: skip


def test_the_template_refuses_bad_requests_keeps_no_fd_of_theirs_and_serves_on(
    template: Template, tmp_path: Path
) -> None:
    """Every malformed request (too deep, wrong types, too big, too few or many fds) is
    refused with a reason, its fds closed; the template still forks the next good one."""
    code = _code(tmp_path)
    marker = tmp_path / "marker"

    def served() -> None:
        marker.unlink(missing_ok=True)
        done = subprocess.run(forkrun.command("writes") + [str(marker)], cwd=code,
                              env=_env(template.name), input="", capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 7 and marker.read_text().startswith(FORKED), done.stderr

    served()  # the template has imported everything it will
    assert template.proc is not None
    before = _fds(template.proc.pid)
    for bad in BAD_REQUESTS:
        message, reason = bad.values
        answer = _send(template, message)
        assert answer.startswith(b"F") and reason.encode() in answer, (bad.id, answer)
    good = json.dumps(GOOD).encode()
    for count in (0, 1, 4):
        assert b"3 fds" in _send(template, good, count)
    _kept_none(template.proc.pid, before)
    served()
    _kept_none(template.proc.pid, before)


def test_the_template_refuses_another_user_and_keeps_none_of_its_fds(
    template: Template, tmp_path: Path, nobodys: Path
) -> None:
    """Another user let reach the socket (here on purpose, through an fd of its folder: that
    folder is this user's alone) is refused at once; the template keeps none of the fds it
    sent and serves on."""
    _, _, path = template.name.partition(":")
    Path(path).parent.chmod(0o711)
    Path(path).chmod(0o777)
    sender = nobodys / "sender.py"
    sender.write_text(textwrap.dedent("""\
        import json, os, socket, sys
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(f"/proc/self/fd/{sys.argv[1]}/template.sock")
        fds = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
        try:
            socket.send_fds(sock, [json.dumps({"argv": ["x"], "env": {}, "cwd": "/"}).encode()],
                            fds)
            print(repr(sock.recv(100)))
        except OSError as exc:  # the template closed the connection first
            print(type(exc).__name__)
    """))
    sender.chmod(0o644)
    assert template.proc is not None
    code = _code(tmp_path)
    marker = tmp_path / "marker"
    subprocess.run(forkrun.command("writes") + [str(marker)], cwd=code, input=b"",
                   env=_env(template.name), timeout=120, check=False)
    before = _fds(template.proc.pid)
    folder = os.open(Path(path).parent, os.O_PATH | os.O_DIRECTORY)
    try:
        done = subprocess.run([*AS_NOBODY, sys.executable, "-I", str(sender), str(folder)],
                              pass_fds=[folder], capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip
    finally:
        os.close(folder)
    refused = ("b''", "BrokenPipeError", "ConnectionResetError")
    assert done.returncode == 0 and done.stdout.strip() in refused, done.stderr
    _kept_none(template.proc.pid, before)
    assert "refused a client of uid 65534" in Path(template.log_file).read_text()
    marker.unlink()
    served = subprocess.run(forkrun.command("writes") + [str(marker)], cwd=code, input=b"",
                            env=_env(template.name), timeout=120, check=False)
    assert served.returncode == 7 and marker.read_text().startswith(FORKED)


# ------------------------------------------------------------ warm pools whose template died

KEEP_S = 60


def _pool_job(session: LocalSession, tmp_path: Path, name: str) -> dict[str, Any]:
    """Run a 1-host, 1-worker job that asks for a warm pool; its description once Completed,
    its script having run (its rank said who started it)."""
    source = source_tar(tmp_path / name, JOBS / "parent_probe.py")
    request = training_request(session, name, source, "parent_probe.py", workers=1)
    request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = KEEP_S
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "rank 0 parent: " in log_text(session, name, "algo-1")
    return job


def _pool(session: LocalSession, job: str) -> dict[str, Any]:
    from ddpjob.local.warmpools import pools

    return json.loads((pools.pools_dir(session.home) / _pool_name(session, job)
                       / pools.RECORD).read_text())


def _pool_name(session: LocalSession, job: str) -> str:
    return next(p["Name"] for p in session.warm_pools() if job in p["Jobs"])


@pytest.mark.slow
def test_a_pool_whose_template_was_killed_is_never_claimed(tmp_path: Path) -> None:
    """The idle pool's template is SIGKILLed (the OOM killer's pick). While its keeper cannot
    act (stopped), a matching job does not claim the pool (`pools.claim` checks the template
    is the recorded process): it starts on a new pool and runs its script. Once the keeper
    runs again it ends the pool; a pool whose keeper runs ends as its template dies."""
    with local_session_at(tmp_path / "home") as session:
        _pool_job(session, tmp_path, "first")
        first = _pool(session, "first")
        os.kill(first["keeper_pid"], signal.SIGSTOP)
        try:
            os.kill(first["template_pid"], signal.SIGKILL)
            wait_for(lambda: not proctree.is_alive(first["template_pid"]), 60,
                     "the template to die")
            _pool_job(session, tmp_path, "second")
            assert _pool_name(session, "second") != first["id"]
        finally:
            os.kill(first["keeper_pid"], signal.SIGCONT)
        wait_for(lambda: next(p for p in session.warm_pools() if p["Name"] == first["id"])
                 ["Status"] == "Terminated", 60, "the first pool to end")
        second = _pool(session, "second")
        os.kill(second["template_pid"], signal.SIGKILL)
        wait_for(lambda: _pool(session, "second")["status"] == "Terminated", 60,
                 "the second pool to end with its template")
        _pool_job(session, tmp_path, "third")
        assert _pool_name(session, "third") not in (first["id"], second["id"])
        session.stop_warm_pool(_pool_name(session, "third"))
        assert_no_processes(session.home)
