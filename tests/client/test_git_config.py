"""git_config: the code is cloned from a Git repository when the job is planned (a local bare
repository here, through the real git)."""

from __future__ import annotations

import base64
import io
import json
import ssl
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from ddpjob import PyTorch
from ddpjob.errors import UserInputError

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository whose main branch has two commits; returns it and the first commit."""
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    (work / "src" / "train.py").write_text("print('v1')\n")
    (work / "README.md").write_text("repo\n")
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "v1", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "src" / "train.py").write_text("print('v2')\n")
    (work / "src" / "helper.py").write_text("X = 2\n")
    git("commit", "-q", "-am", "v2", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "helper", cwd=work)
    bare = tmp_path / "repo.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return bare, first


def code_members(bucket: str, job: str) -> dict[str, bytes]:
    body = boto3.client("s3").get_object(
        Bucket=bucket, Key=f"out/{job}/source/sourcedir.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def estimator(aws_session: Any, bucket: str, git_config: dict, **extra: Any) -> PyTorch:
    return PyTorch(entry_point="train.py", source_dir="src", git_config=git_config, role=ROLE,
                   image_uri=IMAGE, instance_type="ml.c5.xlarge", session=aws_session,
                   output_path=f"s3://{bucket}/out", **extra)


def test_branch_is_cloned_and_packed(repo: tuple[Path, str], aws_session: Any,
                                     s3_bucket: str) -> None:
    bare, _ = repo
    est = estimator(aws_session, s3_bucket, {"repo": str(bare), "branch": "main"})
    assert est.training_job_request(job_name="git-0")["HyperParameters"][
        "sagemaker_program"] == json.dumps("train.py")
    est.fit(wait=False, job_name="git-1")
    assert code_members(s3_bucket, "git-1") == {"helper.py": b"X = 2\n",
                                                "train.py": b"print('v2')\n"}


def test_commit_is_checked_out(repo: tuple[Path, str], aws_session: Any,
                               s3_bucket: str) -> None:
    bare, first = repo
    estimator(aws_session, s3_bucket, {"repo": str(bare), "commit": first}
              ).fit(wait=False, job_name="git-2")
    assert code_members(s3_bucket, "git-2") == {"train.py": b"print('v1')\n"}


def test_entry_point_without_source_dir_is_relative_to_the_repo(
        repo: tuple[Path, str], aws_session: Any, s3_bucket: str) -> None:
    bare, _ = repo
    est = PyTorch(entry_point="src/train.py", git_config={"repo": str(bare)}, role=ROLE,
                  image_uri=IMAGE, instance_type="ml.c5.xlarge", session=aws_session,
                  output_path=f"s3://{s3_bucket}/out")
    est.fit(wait=False, job_name="git-3")
    assert code_members(s3_bucket, "git-3") == {"train.py": b"print('v2')\n"}


def test_missing_repository_is_one_clear_error(tmp_path: Path, aws_session: Any,
                                               s3_bucket: str, moto_probe: Any) -> None:
    est = estimator(aws_session, s3_bucket, {"repo": str(tmp_path / "nowhere.git")})
    with pytest.raises(UserInputError, match="git_config: git clone failed") as excinfo:
        est.fit(wait=False, job_name="git-4")
    assert "\n" not in str(excinfo.value)
    assert moto_probe.s3_keys(s3_bucket) == []


def test_source_dir_may_not_leave_the_clone(repo: tuple[Path, str], aws_session: Any,
                                            s3_bucket: str) -> None:
    bare, _ = repo
    est = estimator(aws_session, s3_bucket, {"repo": str(bare)}, dependencies=["../../etc"])
    with pytest.raises(UserInputError, match="is outside the repository"):
        est.training_job_request(job_name="git-5")


TOKEN = "ghp_s3cr3tTOKEN"


@pytest.fixture
def https_repo(repo: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
               ) -> Iterator[tuple[str, list[str | None]]]:
    """The bare repository served over HTTPS (git's dumb protocol, a self-signed certificate
    that git trusts through GIT_SSL_CAINFO); the Authorization headers received."""
    bare, _ = repo
    git("update-server-info", cwd=bare)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    seen: list[str | None] = []

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(bare.parent), **kwargs)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append(self.headers.get("Authorization"))
            super().do_GET()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_port}/{bare.name}", seen
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize("how", ["token", "in-url"])
def test_credentials_are_sent_but_never_shipped(https_repo: tuple[str, list], how: str,
                                                aws_session: Any, s3_bucket: str) -> None:
    """The clone authenticates with the token, and the archive (source_dir is the whole
    repository here) holds neither `.git` nor the token anywhere."""
    url, seen = https_repo
    config = ({"repo": url, "token": TOKEN} if how == "token"
              else {"repo": url.replace("https://", f"https://{TOKEN}@")})
    est = PyTorch(entry_point="src/train.py", source_dir=".", git_config=config, role=ROLE,
                  image_uri=IMAGE, instance_type="ml.c5.xlarge", session=aws_session,
                  output_path=f"s3://{s3_bucket}/out")
    est.fit(wait=False, job_name=f"git-token-{how}")
    basic = base64.b64encode(f"{TOKEN}:".encode()).decode()
    members = code_members(s3_bucket, f"git-token-{how}")
    assert sorted(members) == ["README.md", "src/helper.py", "src/train.py"]
    assert not any(TOKEN.encode() in data or basic.encode() in data
                   for data in members.values())
    assert seen and set(seen) == {f"Basic {basic}"}
