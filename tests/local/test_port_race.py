"""The rendezvous port a local job's supervisor chooses cannot be lost before the first host's
store binds it (issue 23): the supervisor holds it (`hosts.reserve_port`) until the hosts end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ddpjob.local.control import control_plane
from ddpjob.local.session import LocalSession

from tests.local.conftest import JOBS, log_text, source_tar, training_request, wait_until_ended

SUPERVISORS = Path(__file__).parent / "supervisors"

# Run in a network namespace of its own, whose ephemeral range is 4 ports: every port the
# kernel would hand out automatically is asked for, so the reserved one is seen never given.
_KERNEL_PROBE = textwrap.dedent("""
    import json, socket, subprocess
    from ddpjob.local.run.hosts import reserve_port
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
        f.write("40000 40003")
    reserved = reserve_port()
    port = reserved.getsockname()[1]
    server = socket.socket()
    server.bind(("127.0.0.1", 50000))
    server.listen(16)

    def exhaust(take):
        got, held = [], []
        while True:
            sock = socket.socket()
            try:
                take(sock)
            except OSError:
                sock.close()
                return got
            held.append(sock)
            got.append(sock.getsockname()[1])

    found = {"port": port,
             "bound": exhaust(lambda s: s.bind(("127.0.0.1", 0))),
             "connected": exhaust(lambda s: s.connect(("127.0.0.1", 50000)))}
    outright = socket.socket()
    try:
        outright.bind(("127.0.0.1", port))
        found["outright"] = "bound"
    except OSError as exc:
        found["outright"] = exc.errno
    store = socket.socket()  # as ddpjob_runtime.job.agent binds the first host's store
    store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    store.bind(("127.0.0.1", port))
    store.listen()
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(b"x")
    found["store"] = store.accept()[0].recv(1).decode()
    print(json.dumps(found))
""")


def test_the_kernel_gives_a_reserved_port_to_nobody_but_the_store() -> None:
    """What `reserve_port` relies on, seen in a private network namespace: while the port is
    held, no ephemeral bind or outgoing connection gets it, a bind without SO_REUSEADDR is
    refused, and the store's bind (SO_REUSEADDR) listens and accepts."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip")
    probe = subprocess.run(["unshare", "-rn", sys.executable, "-c", _KERNEL_PROBE],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 and "unshare" in probe.stderr:
        pytest.skip(f"no network namespace here: {probe.stderr.strip()}")
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    others = sorted({40000, 40001, 40002, 40003} - {found["port"]})
    assert 40000 <= found["port"] <= 40003
    assert found["bound"] and sorted(found["bound"]) == others
    assert found["connected"] and sorted(found["connected"]) == others
    assert found["outright"] == 98  # EADDRINUSE
    assert found["store"] == "x"


@pytest.mark.slow
def test_a_job_keeps_its_port_when_another_program_binds_it_first(
    session: LocalSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the supervisor choosing the port and the first host's store binding it, another
    program binds the port and listens (`port_intruder`): the bind is refused and the job
    completes on that port. A port only found free would be taken and the job would fail.
    Real torchrun (its store binds the port); the job's fixed `PYTHONHASHSEED` has the workers
    forked from the template (the port, not a hash seed per rank, is the subject)."""
    monkeypatch.setenv("PYTHONPATH", str(SUPERVISORS))  # the supervisor's `python -m`
    monkeypatch.setattr(control_plane, "SUPERVISOR_MODULE", "port_intruder")
    source = source_tar(tmp_path / "src", JOBS / "noop.py")
    name = "port-race"
    session.sagemaker_client.create_training_job(**training_request(session, name, source,
                                                                    "noop.py", hash_seed="0"))
    job = wait_until_ended(session, name)
    intruder = json.loads((session.job_dir(name) / "intruder.json").read_text())
    platform = json.loads(
        (session.job_dir(name) / "hosts/algo-1/input/config/platform.json").read_text())
    assert intruder["port"] == platform["master_port"]
    assert intruder["taken"] == "[Errno 98] Address already in use", intruder
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "rank 1 of 2 done" in log_text(session, name, "algo-1")
