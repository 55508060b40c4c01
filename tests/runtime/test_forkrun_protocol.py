"""`forkrun`'s side of the template protocol, against a fake template: the far end of a
SOCK_SEQPACKET socket that the test drives (the real template: test_zygote.py, jobs tier).

A template answers a request with `R<pid>` (forked), `F<reason>` (it could not set the process
up), `P` (run it as an interpreter of its own), then `X<wait status>` once the process ended; a
socket closed without `X` means the template died, and the process with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddpjob_runtime.shared import contract, forkrun

MAX_MESSAGE = 1 << 16


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the client's end, the fake template's end) of a connected SOCK_SEQPACKET pair."""
    client, template = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with client, template:
        yield client, template


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A fake template's `DDPJOB_ZYGOTE` (this process serves the socket, as a template does
    its own) and its listening socket."""
    path = str(tmp_path / "template.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        forkrun.reach(sock, path, bind=True)
        sock.listen(4)
        sock.settimeout(60)  # a client that never connects fails the test, never hangs it
        yield forkrun.template_value(os.getpid(), path), sock


def wait_status(script: str) -> int:
    """The raw waitpid status of `/bin/sh -c script`: what a template sends after `X`."""
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", script], os.environ)
    return os.waitpid(pid, 0)[1]


def receive_request(conn: socket.socket) -> dict:
    """A request as the template reads it; the three stdio fds it carried are closed."""
    message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
    for fd in fds:
        os.close(fd)
    assert len(fds) == 3, fds
    return json.loads(message)


def test_a_forked_answer_gives_the_pid_and_the_template_the_request_and_stdio(
    pair: tuple[socket.socket, socket.socket], tmp_path: Path,
) -> None:
    client, template = pair
    template.send(b"R4242")
    files = [(tmp_path / name).open("w") for name in ("in", "out", "err")]
    with contextlib.ExitStack() as stack:
        for f in files:
            stack.enter_context(f)
        request = forkrun.request_message(["mod", "a b"], {"K": "v\n\"q\""}, "/w", launcher=77)
        pid = forkrun._ask(client, request, tuple(f.fileno() for f in files))
        message, fds, _, _ = socket.recv_fds(template, MAX_MESSAGE, 3)
        try:
            received = [os.fstat(fd).st_ino for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        assert pid == 4242
        assert json.loads(message) == {"argv": ["mod", "a b"], "env": {"K": "v\n\"q\""},
                                       "cwd": "/w", "launcher": 77}
        assert received == [os.fstat(f.fileno()).st_ino for f in files]
    assert client.fileno() != -1  # the connection now stands for the forked process


@pytest.mark.parametrize(("answer", "said"), [
    (b"Fno module named 'mod'", "ddpjob_runtime.shared.forkrun: no module named 'mod'\n"),
    (b"P", ""),  # run it as an interpreter of its own: nothing went wrong
])
def test_a_refusal_gives_no_pid_closes_the_connection_and_says_why(
    pair: tuple[socket.socket, socket.socket], capsys: pytest.CaptureFixture[str],
    answer: bytes, said: str,
) -> None:
    client, template = pair
    template.send(answer)
    assert forkrun._ask(client, forkrun.request_message(["mod"], {}, "/"), (0, 1, 2)) is None
    assert client.fileno() == -1
    assert capsys.readouterr().err == said


def test_a_template_that_closed_without_answering_gives_no_pid(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, template = pair
    template.close()
    assert forkrun._ask(client, forkrun.request_message(["mod"], {}, "/"), (0, 1, 2)) is None
    assert client.fileno() == -1


@pytest.mark.parametrize(("script", "code"), [
    ("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM),
])
def test_a_forked_process_exits_as_the_template_reports_it(
    pair: tuple[socket.socket, socket.socket], script: str, code: int,
) -> None:
    client, template = pair
    forked = forkrun.Forked(client, 4242, ["mod"])
    assert forked.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        forked.wait(timeout=0.01)
    template.send(b"X%d" % wait_status(script))
    assert forked.wait(timeout=60) == code
    assert (forked.poll(), forked.returncode) == (code, code)
    assert client.fileno() == -1


def test_a_forked_process_whose_template_died_was_killed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, template = pair
    forked = forkrun.Forked(client, 4242, ["mod"])
    template.close()
    assert forked.wait(timeout=60) == -signal.SIGKILL


def test_fork_asks_the_named_template_for_this_process(
    listener: tuple[str, socket.socket],
) -> None:
    name, sock = listener
    requests: list[dict] = []

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            requests.append(receive_request(conn))
            conn.send(b"R4242")
            conn.send(b"X%d" % wait_status("exit 7"))

    server = threading.Thread(target=serve)
    server.start()
    forked = forkrun.fork(["mod", "x"], {contract.ENV_ZYGOTE: name, "K": "v"}, "/w")
    server.join(timeout=60)
    assert forked is not None and (forked.pid, forked.args) == (4242, ["mod", "x"])
    assert forked.wait(timeout=60) == 7
    assert requests == [{"argv": ["mod", "x"], "env": {contract.ENV_ZYGOTE: name, "K": "v"},
                         "cwd": "/w", "launcher": os.getpid()}]


def test_fork_without_a_serving_template_gives_none(tmp_path: Path) -> None:
    assert forkrun.fork(["mod"], {}, "/") is None
    gone = forkrun.template_value(os.getpid(), str(tmp_path / "gone.sock"))
    assert forkrun.fork(["mod"], {contract.ENV_ZYGOTE: gone}, "/") is None


@contextlib.contextmanager
def client_of(name: str, argv: list[str], cwd: Path) -> Iterator[subprocess.Popen]:
    """forkrun's client process for `python -m argv...`, asking the fake template `name`;
    killed (if still running) after the block."""
    client = subprocess.Popen([*forkrun.command(argv[0]), *argv[1:]], cwd=cwd,
                              env={**os.environ, contract.ENV_ZYGOTE: name},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield client
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()


def test_the_client_relays_a_signal_to_its_process_and_exits_as_it_did(
    listener: tuple[str, socket.socket], tmp_path: Path,
) -> None:
    name, sock = listener
    with client_of(name, ["mod"], tmp_path) as client:
        conn, _ = sock.accept()
        with conn:
            assert receive_request(conn)["argv"] == ["mod"]
            # The process the template would fork: a group of its own, as a forked one has, and
            # SIGTERM as a fresh process has it, whatever this test process inherited or set
            # (an ignored or blocked SIGTERM lasts through exec: the sleep outlived the relay
            # once in a run under pytest-xdist).
            child = os.posix_spawn("/bin/sleep", ["sleep", "60"], os.environ, setsid=True,
                                   setsigdef=[signal.SIGTERM], setsigmask=[])
            conn.send(b"R%d" % child)
            client.send_signal(signal.SIGTERM)
            status = os.waitpid(child, 0)[1]
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
            conn.send(b"X%d" % status)
            assert client.wait(timeout=60) == -signal.SIGTERM


@pytest.mark.parametrize(("answer", "said"), [
    (b"Fcould not enter the mount namespace", "could not enter the mount namespace"),
    (b"P", None),
])
def test_a_client_the_template_does_not_serve_runs_the_module_itself_asked_once(
    listener: tuple[str, socket.socket], tmp_path: Path, answer: bytes, said: str | None,
) -> None:
    name, sock = listener
    (tmp_path / "probe.py").write_text(
        "import os, sys\nprint(os.getppid(), sys.argv[1:])\nsys.exit(5)\n")
    with client_of(name, ["probe", "a b"], tmp_path) as client:
        conn, _ = sock.accept()
        with conn:
            assert receive_request(conn)["argv"] == ["probe", "a b"]
            conn.send(answer)
            out, err = client.communicate(timeout=60)
    assert client.returncode == 5, err
    assert out == f"{os.getpid()} ['a b']\n"  # the client became the module: our child
    assert (f"ddpjob_runtime.shared.forkrun: {said}\n" in err) if said else not err
    sock.settimeout(0)
    with pytest.raises(BlockingIOError):  # it asked once: no second connection is waiting
        sock.accept()
