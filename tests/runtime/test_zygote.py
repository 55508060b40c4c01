"""The job's template process (`ddpjob_runtime.localkit.zygote`) and its client (`forkrun`): real
templates, real forks, real signals; a forked process must look, exit and die like one that
was started on its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from ddpjob.local.base.templates import Template
from ddpjob.local.isolation import capabilities, sandbox

from tests.conftest import HOST_NAMESPACES
from tests.local.conftest import assert_no_processes, processes_under, wait_for

ROOT = Path(__file__).parents[2]
TEMPLATE = "ddpjob-template "  # the title of a template process (its folder follows)
PYTHONPATH = os.pathsep.join([str(ROOT / "sdk"), str(ROOT / "runtime"), str(ROOT)])


@pytest.fixture
def template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Template]:
    """A started template whose environment has a variable no client has; stopped after."""
    monkeypatch.setenv("ONLY_IN_THE_TEMPLATE", "1")
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)
    started = Template(tmp_path, tmp_path / "template.log")
    started.start()
    yield started
    started.stop()
    assert_no_processes(tmp_path)


def _module(tmp_path: Path, name: str, source: str) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / f"{name}.py").write_text(textwrap.dedent(source))
    return code


def _client(*argv: str) -> list[str]:
    return [sys.executable, "-m", "ddpjob_runtime.shared.forkrun", *argv]


def _env(template: Template | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ONLY_IN_THE_TEMPLATE"}
    env.update({"PYTHONPATH": PYTHONPATH, **extra})
    env.pop("DDPJOB_ZYGOTE", None)
    if template is not None:
        env["DDPJOB_ZYGOTE"] = template.name
    return env


PROBE = """\
    import json, os, sys
    parent = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
    print(json.dumps({
        "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
        "mine": os.environ.get("MINE"), "template": os.environ.get("ONLY_IN_THE_TEMPLATE"),
        "left": os.environ.get("LEFT_BY_THE_LAST"), "leftover": "leftover" in sys.modules,
        "torch": "torch" in sys.modules, "parent": parent,
        "cmdline": open("/proc/self/cmdline").read().split("\\0")[:-1],
        "stdin": sys.stdin.read(),
    }))
    os.environ["LEFT_BY_THE_LAST"] = "1"
    sys.modules["leftover"] = sys
"""


def _probe(template: Template | None, code: Path) -> dict:
    done = subprocess.run(_client("probe", "a b", "c"), cwd=code,
                          env=_env(template, MINE="x"), input="from the client's stdin",
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_a_forked_process_is_the_clients_own_and_sees_nothing_of_the_last(
    template: Template, tmp_path: Path
) -> None:
    code = _module(tmp_path, "probe", PROBE)
    for _ in range(2):  # the second sees nothing the first left in its process
        seen = _probe(template, code)
        assert seen["argv"] == [str(code / "probe.py"), "a b", "c"]
        assert seen["cwd"] == seen["path0"] == str(code)
        assert (seen["mine"], seen["template"], seen["left"]) == ("x", None, None)
        assert seen["stdin"] == "from the client's stdin"
        assert not seen["leftover"] and seen["torch"]  # torch came with the template
        assert seen["parent"][0].startswith(TEMPLATE)  # forked, not started
        assert seen["cmdline"] == [sys.executable, "-m", "probe", "a b", "c"]


def test_without_a_template_the_client_runs_the_module_itself(tmp_path: Path) -> None:
    code = _module(tmp_path, "probe", PROBE)
    seen = _probe(None, code)
    assert seen["argv"] == [str(code / "probe.py"), "a b", "c"]
    assert not seen["parent"][0].startswith(TEMPLATE) and not seen["torch"]


@pytest.mark.parametrize(("source", "code"), [
    ("raise SystemExit(7)", 7),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ("raise ValueError('boom')", 1),
])  # fmt: skip
def test_the_client_exits_as_its_process_did(
    template: Template, tmp_path: Path, source: str, code: int
) -> None:
    folder = _module(tmp_path, "ends", source)
    done = subprocess.run(_client("ends"), cwd=folder, env=_env(template),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == code, done.stderr
    assert ("ValueError: boom" in done.stderr) == (code == 1)


SLEEPER = """\
    import os, signal, sys, time
    from pathlib import Path
    if sys.argv[1] == "handle":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))
    Path(sys.argv[2]).write_text(str(os.getpid()))
    time.sleep(600)
"""


def _sleeping(template: Template, tmp_path: Path, how: str) -> tuple[subprocess.Popen, int]:
    code = _module(tmp_path, "sleeper", SLEEPER)
    pid_file = tmp_path / "pid"
    client = subprocess.Popen(_client("sleeper", how, str(pid_file)), cwd=code,
                              env=_env(template))
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120, "the pid"))
    return client, pid


def test_a_signal_to_the_client_reaches_its_process(template: Template, tmp_path: Path) -> None:
    client, _ = _sleeping(template, tmp_path, "handle")
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=120) == 5


def test_a_killed_client_takes_its_process_along(template: Template, tmp_path: Path) -> None:
    client, pid = _sleeping(template, tmp_path, "sleep")
    client.kill()
    client.wait(timeout=120)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 60, "the forked process to end")


def test_a_stopped_template_leaves_no_process(template: Template, tmp_path: Path) -> None:
    client, pid = _sleeping(template, tmp_path, "sleep")
    assert pid in processes_under(tmp_path)
    template.stop()
    assert client.wait(timeout=120) == 128 + signal.SIGKILL
    assert_no_processes(tmp_path)


@HOST_NAMESPACES
def test_a_forked_process_runs_in_its_clients_mount_namespace(
    template: Template, tmp_path: Path
) -> None:
    root, hosts_file = tmp_path / "root", tmp_path / "hosts"
    root.mkdir()
    (root / "marker").write_text("this host's /opt/ml")
    hosts_file.write_text("127.0.0.1 localhost\n")
    code = _module(tmp_path, "inside", """\
        import os
        caps = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0]
        print(open("/opt/ml/marker").read(), int(caps.split()[1], 16) >> 21 & 1, os.getcwd())
    """)  # fmt: skip
    give_up = capabilities.given_up(root=os.geteuid() == 0, namespaces=True, staged=False)
    command = sandbox.wrap(_client("inside"), root=root, read_only=[], hosts_file=hosts_file,
                           give_up=give_up)  # the forked process holds no CAP_SYS_ADMIN either
    env = _env(template, PYTHONPATH=os.pathsep.join([PYTHONPATH, str(code)]))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.split() == ["this", "host's", "/opt/ml", "0", "/opt/ml"]


def test_the_clients_request_is_the_json_the_template_reads() -> None:
    """The client encodes its request without the json module (its import would double the
    client's start): the same text json.dumps writes, for any string the environment holds."""
    from ddpjob_runtime.shared import forkrun

    odd = ["plain", 'quo"te\\back', "tab\tnew\nline", "ünï €", "\udcff surrogate-escaped", ""]
    env = {name: value for name, value in zip(odd, reversed(odd), strict=True)}
    message = forkrun.request_message(odd, env, "/opt/ml/code")
    assert message == json.dumps({"argv": odd, "env": env, "cwd": "/opt/ml/code"}).encode()
    assert json.loads(message) == {"argv": odd, "env": env, "cwd": "/opt/ml/code"}


def test_the_client_run_by_path_needs_neither_site_nor_pythonpath(
    template: Template, tmp_path: Path
) -> None:
    """`forkrun.command()` (what local jobs run: `python -I -S .../forkrun.py`) finds its own
    package beside the file and is served like `python -m ddpjob_runtime.shared.forkrun`."""
    from ddpjob_runtime.shared import forkrun

    code = _module(tmp_path, "probe", PROBE)
    env = _env(template, MINE="x")
    env.pop("PYTHONPATH")
    command = forkrun.command("probe")
    assert command[1:3] == ["-I", "-S"]
    done = subprocess.run([*command, "a b", "c"], cwd=code, env=env, input="in",
                          capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert seen["argv"] == [str(code / "probe.py"), "a b", "c"] and seen["mine"] == "x"
    assert seen["parent"][0].startswith(TEMPLATE) and seen["torch"]


GC_PROBE = """\
    import gc, json, weakref

    class Cycle:
        pass

    cycle = Cycle()
    cycle.me = cycle
    del cycle
    print(json.dumps({"frozen": gc.get_freeze_count(), "enabled": gc.isenabled(),
                      "collected": gc.collect()}), flush=True)
    weakref.finalize(Cycle, print, "its own finalizer ran at exit")
"""


def test_the_template_freezes_its_objects_and_a_forked_process_still_collects_its_own(
    template: Template, tmp_path: Path
) -> None:
    """The preloaded objects are frozen (a child's collections do not touch, so copy, their
    pages); the child's own garbage is collected and its own exit finalizers run."""
    code = _module(tmp_path, "gcprobe", GC_PROBE)
    done = subprocess.run(_client("gcprobe"), cwd=code, env=_env(template),
                          capture_output=True, text=True, timeout=120, check=True)
    first, last = done.stdout.splitlines()
    seen = json.loads(first)
    assert seen["frozen"] > 10_000 and seen["enabled"] and seen["collected"] >= 1
    assert last == "its own finalizer ran at exit"


def test_a_process_asking_the_template_itself_holds_its_child_as_popen_would(
    template: Template, tmp_path: Path
) -> None:
    """`forkrun.fork` (no client: the launcher and torchrun's agent): the child's pid is its
    process group and names the asker as its launcher; poll, wait and returncode as Popen's."""
    from ddpjob_runtime.shared import forkrun

    code = _module(tmp_path, "sleeper", SLEEPER)
    _module(tmp_path, "ends", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    pid_file = tmp_path / "pid"
    child = forkrun.fork(["sleeper", "handle", str(pid_file)], _env(template), str(code))
    assert child is not None
    wait_for(pid_file.exists, 120, "the pid")
    assert int(pid_file.read_text()) == child.pid == os.getpgid(child.pid)
    environ = Path(f"/proc/{child.pid}/environ").read_bytes().split(b"\0")
    assert f"DDPJOB_LAUNCHER={os.getpid()}".encode() in environ
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.1)
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(timeout=120) == 5 and child.returncode == 5 and child.poll() == 5
    killed = forkrun.fork(["ends"], _env(template), str(code))
    assert killed is not None and killed.wait(timeout=120) == -signal.SIGKILL
    assert forkrun.fork(["ends"], _env(None), str(code)) is None  # no template: start it yourself


ASKER = """\
    import os, sys, time
    from ddpjob_runtime.shared import forkrun
    child = forkrun.fork(["sleeper", "sleep", sys.argv[1]], dict(os.environ), os.getcwd())
    time.sleep(600)
"""


def test_a_process_that_asked_the_template_takes_its_child_along_when_killed(
    template: Template, tmp_path: Path
) -> None:
    code = _module(tmp_path, "sleeper", SLEEPER)
    _module(tmp_path, "asker", ASKER)
    pid_file = tmp_path / "pid"
    asker = subprocess.Popen([sys.executable, "-m", "asker", str(pid_file)], cwd=code,
                             env=_env(template))
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120, "the pid"))
    asker.kill()
    asker.wait(timeout=120)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 60, "the forked process to end")


def test_a_module_the_template_refuses_to_fork_runs_on_its_own_asked_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The launcher asks the template for a client's module itself; where the template refuses
    (here a socket that refuses every request), the module runs in an interpreter of its own
    and the template is not asked a second time (by a client), so its reason shows once."""
    import socket
    import threading

    from ddpjob_runtime.job import launcher
    from ddpjob_runtime.shared import forkrun

    code = _module(tmp_path, "writer", "import sys; open(sys.argv[1], 'w').write('ran')")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(tmp_path / "template.sock"))
    listener.listen()
    requests: list[bytes] = []

    def refuse() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                requests.append(socket.recv_fds(conn, 1 << 20, 3)[0])
                conn.send(b"Fthe template refuses")

    threading.Thread(target=refuse, daemon=True).start()
    out = tmp_path / "out"
    try:
        env = {**_env(None), "DDPJOB_ZYGOTE": f"{os.getpid()}:{tmp_path / 'template.sock'}"}
        result = launcher.run([*forkrun.command("writer"), str(out)], env, str(code))
    finally:
        listener.close()
    assert result.exit_code == 0 and out.read_text() == "ran"
    assert len(requests) == 1 and json.loads(requests[0])["argv"] == ["writer", str(out)]
    assert capfd.readouterr().err.count("the template refuses") == 1
