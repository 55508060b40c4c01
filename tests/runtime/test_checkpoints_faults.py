"""Faults at the S3 endpoint and crashes mid-upload, through a loopback proxy in front of moto.

The proxy answers the first requests with 503 SlowDown / 500 / a dropped connection, or holds a
chosen request so that a child process can be SIGKILLed at an exact point of its upload.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch
from ddpjob_runtime import checkpoints
from ddpjob_runtime.platform import checkpoint_restore
from ddpjob_runtime.shared import storage

pytestmark = pytest.mark.slow  # real processes against a faulty S3 endpoint

MIB = 1024 * 1024
SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")
INTERNAL = b"<Error><Code>InternalError</Code><Message>We encountered an error.</Message></Error>"


class FaultProxy:
    """HTTP proxy to `upstream`: scripted faults for the first requests, optional hold point."""

    def __init__(self, upstream: str, faults: list[str] | None = None,
                 hold: Callable[[str, str], bool] | None = None) -> None:
        self.faults = list(faults or [])  # consumed in order: "503", "500", "drop"
        self.hold = hold
        self.held = threading.Event()
        self.release = threading.Event()
        self.seen: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        target = urlparse(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive and Expect: 100-continue, like S3

            def log_message(self, *args) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                        data += self.rfile.read(size)
                        self.rfile.readline()
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    return data
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                with proxy._lock:
                    fault = proxy.faults.pop(0) if proxy.faults else None
                    proxy.seen.append((self.command, self.path, fault or "ok"))
                if proxy.hold and proxy.hold(self.command, self.path):
                    proxy.held.set()
                    proxy.release.wait(60)
                    fault = "drop"
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault in ("503", "500"):
                    payload = SLOWDOWN if fault == "503" else INTERNAL
                    self.send_response(int(fault))
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                skip = {"expect", "connection", "transfer-encoding", "content-length"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length",
                                         "date", "server"):
                        self.send_header(k, v)
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy_factory(aws_env: str, monkeypatch) -> Iterator[Callable[..., FaultProxy]]:
    proxies: list[FaultProxy] = []

    def make(**kwargs) -> FaultProxy:
        proxy = FaultProxy(aws_env, **kwargs)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def test_transfers_survive_faults(s3_bucket: str, proxy_factory, tmp_path: Path,
                                  monkeypatch) -> None:
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_THRESHOLD", str(5 * MIB))
    monkeypatch.setenv("DDPJOB_S3_MULTIPART_CHUNKSIZE", str(5 * MIB))
    monkeypatch.setenv("DDPJOB_S3_MAX_CONCURRENCY", "2")
    faults = ["503", "500", "drop", "503", "drop", "500"]
    proxy = proxy_factory(faults=list(faults))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    data = os.urandom(11 * MIB)
    (tmp_path / "big").write_bytes(data)
    (tmp_path / "small").write_bytes(b"s")
    storage.upload_file(tmp_path / "big", f"s3://{s3_bucket}/f/big")
    storage.upload_file(tmp_path / "small", f"s3://{s3_bucket}/f/small")
    assert [s for *_, s in proxy.seen[:len(faults)]] == faults  # every fault was served

    proxy.faults = list(faults)
    got = storage.download_prefix(f"s3://{s3_bucket}/f", tmp_path / "dl")
    assert len(got) == 2
    assert (tmp_path / "dl" / "big").read_bytes() == data
    assert (tmp_path / "dl" / "small").read_bytes() == b"s"
    assert not proxy.faults


def test_checkpoint_upload_and_restore_survive_faults(s3_bucket: str, proxy_factory,
                                                      tmp_path: Path, monkeypatch) -> None:
    proxy = proxy_factory(faults=["503", "drop", "500", "503"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(tmp_path / "ck"))
    uri = f"s3://{s3_bucket}/ckpt/faulty"
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", uri)
    checkpoints.save({"w": torch.arange(1000.0)}, step=4)
    checkpoints.flush()
    proxy.faults = ["drop", "503", "500", "drop"]
    assert checkpoint_restore.restore_latest(uri, tmp_path / "restored") == 4
    assert not proxy.faults
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(tmp_path / "restored"))
    assert torch.equal(checkpoints.load_latest()["w"], torch.arange(1000.0))


def test_save_without_block_skips_while_uploading(s3_bucket: str, proxy_factory,
                                                  tmp_path: Path, monkeypatch) -> None:
    proxy = proxy_factory(hold=lambda method, path: method == "PUT" and "manifest" in path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(tmp_path / "ck"))
    monkeypatch.setenv("DDPJOB_CHECKPOINT_URI", f"s3://{s3_bucket}/ckpt/held")
    assert checkpoints.save({"v": 1}, step=1)
    assert proxy.held.wait(60)
    assert checkpoints.save({"v": 2}, step=2, block=False) is False  # one snapshot in flight
    proxy.hold = None
    proxy.release.set()  # the held PUT is dropped, botocore retries it
    checkpoints.flush()
    assert checkpoints.complete_steps(tmp_path / "ck") == [1]
    assert checkpoint_restore.restore_latest(f"s3://{s3_bucket}/ckpt/held", tmp_path / "r") == 1


CHILD = textwrap.dedent("""
    import sys, torch
    from ddpjob_runtime import checkpoints
    n = int(sys.argv[1])
    for step in (1, 2):
        checkpoints.save({"w": torch.full((n,), float(step)), "step": step}, step=step, keep=1)
        checkpoints.flush()
""")


def _is_part_of_step2_state(method: str, path: str) -> bool:
    return method == "PUT" and "step-000000002/state.pt" in path and "partNumber=2" in path


def _is_step2_manifest(method: str, path: str) -> bool:
    return method == "PUT" and path.split("?")[0].endswith("step-000000002/manifest.json")


def _prune_of_step1() -> Callable[[str, str], bool]:
    step2_done = threading.Event()  # step 1's own upload also starts with this DELETE

    def hold(method: str, path: str) -> bool:
        if _is_step2_manifest(method, path):
            step2_done.set()
            return False
        return step2_done.is_set() and method == "DELETE" and "step-000000001/manifest" in path

    return hold


@pytest.mark.parametrize("make_hold,expected_step", [
    (lambda: _is_part_of_step2_state, 1),   # killed mid multipart upload of the new state
    (lambda: _is_step2_manifest, 1),        # killed after the state, before the manifest
    (_prune_of_step1, 2),                   # killed while pruning the older checkpoint
], ids=["mid-state", "before-manifest", "mid-prune"])
def test_crash_during_upload_resumes_from_complete(s3_bucket: str, proxy_factory,
                                                   tmp_path: Path, monkeypatch,
                                                   make_hold, expected_step: int) -> None:
    proxy = proxy_factory(hold=make_hold())
    uri = f"s3://{s3_bucket}/ckpt/crash"
    env = {**os.environ, "AWS_ENDPOINT_URL": proxy.url, "RANK": "0",
           "DDPJOB_CHECKPOINT_DIR": str(tmp_path / "ck"), "DDPJOB_CHECKPOINT_URI": uri,
           "DDPJOB_S3_MULTIPART_THRESHOLD": str(5 * MIB),
           "DDPJOB_S3_MULTIPART_CHUNKSIZE": str(5 * MIB), "DDPJOB_S3_MAX_CONCURRENCY": "1"}
    n = 3 * MIB  # 12 MB of float32: three parts
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(n)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proxy.held.wait(60), child.communicate(timeout=60)[0].decode()[-2000:]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    # the next run's bootstrap (straight to moto) gets the latest complete one, intact
    restored = tmp_path / "restored"
    assert checkpoint_restore.restore_latest(uri, restored) == expected_step
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(restored))
    state = checkpoints.load_latest()
    assert state["step"] == expected_step
    assert torch.equal(state["w"], torch.full((n,), float(expected_step)))
    # and the killed process's own folder never offers a partial checkpoint
    monkeypatch.setenv("DDPJOB_CHECKPOINT_DIR", str(tmp_path / "ck"))
    local = checkpoints.load_latest()
    assert torch.equal(local["w"], torch.full((n,), float(local["step"])))
