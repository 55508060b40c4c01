"""Fixtures shared by every test folder: a moto S3/SageMaker/Logs server over real HTTP; and
every test's tier (`unit`, `integration`, `jobs` or `interop`, see docs/testing.md), given by
what it uses."""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.isolation import sandbox

REGION = "us-east-1"
TESTS = Path(__file__).parent
TIERS = ("unit", "integration", "jobs", "interop")
#: Folders of tests that run the official SageMaker SDK (v2, v3's venv) or SageMaker's training
#: toolkits; test files named *notebook* execute a notebook in a real kernel.
INTEROP_FOLDERS = frozenset({"interop", "sdk3", "dlc"})
INTEROP_FIXTURES = frozenset({"sdk3_python", "dlc_python", "sdk", "sdk_offline"})
#: What starts real local jobs, `ddpjob-train` hosts or a job's template (a process that imports
#: torch): e2e's folder; `run_hosts` (tests/runtime), `template` (test_zygote.py), `finished`
#: (test_cli.py); and the tests marked `slow` by hand.
JOBS_FOLDERS = frozenset({"e2e"})
JOBS_FIXTURES = frozenset({"run_hosts", "template", "finished"})
#: Real servers and processes but no job: the moto server over HTTP (`aws_env`, `s3_bucket` and
#: every fixture on them), a LocalSession of tests/local (its jobs' files, its S3 bucket).
INTEGRATION_FIXTURES = frozenset({"moto_endpoint", "session"})
#: Tests whose multi-host jobs use port 7777 (SageMaker's PyTorch toolkit, ModelTrainer's
#: drivers): under `pytest -n 3` (`--dist loadgroup`, pyproject's addopts) they all run in one
#: worker, one at a time (else a job waits for the port behind another worker's job and may
#: time out).
FIXED_PORT = pytest.mark.xdist_group("port-7777")
#: Tests whose hosts need their own mount namespace (their own /opt/ml, a container command's
#: view): skipped, with the reason, where this machine gives none.
HOST_NAMESPACES = pytest.mark.skipif(
    sandbox.available() is not None,
    reason=f"hosts need their own namespaces (/opt/ml): {sandbox.available()}")
#: The "s3" value of a test's file-or-S3 parameter whose S3 is the moto server, asked for inside
#: the test (`request.getfixturevalue("s3_bucket")`), where the tier rules cannot see it.
S3_ON_MOTO = pytest.param("s3", marks=pytest.mark.integration)
#: The one helper that ends a test job's process group (barrier, then destroy): shipped with
#: every script that initialises one, as `dependencies` or beside it in its source folder.
GROUP_TEARDOWN = TESTS / "jobkit" / "group_teardown.py"


def cell_text(cell: dict) -> str:
    """What an executed notebook cell printed: its streams, else its results' plain text."""
    return "".join(out.get("text", "") or "".join(out.get("data", {}).get("text/plain", ""))
                   for out in cell.get("outputs", []))


def executed_code_cells(path: Path, timeout_s: int) -> tuple[list[Any], list[str]]:
    """The notebook `path` run top to bottom in a fresh kernel of this environment (which
    inherits this process's environment), in its own folder: its code cells and their texts."""
    import nbformat  # the notebook tests' alone
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, kernel_name="python3", timeout=timeout_s,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    return code, [cell_text(cell) for cell in code]


def folder_tier(path: Path) -> str | None:
    """The tier of every test under `path` that its place alone decides, if any."""
    parts = set(path.relative_to(TESTS).parts)
    if INTEROP_FOLDERS & parts or "notebook" in path.name:
        return "interop"
    return "jobs" if JOBS_FOLDERS & parts else None


def tier_of(item: pytest.Item) -> str:
    """The tier a test belongs to: its folder's, or a tier marker it has (one that disagrees
    with its folder is an error), else what it uses decides. `slow` (a test that starts real
    jobs, marked by hand) means `jobs`."""
    placed = folder_tier(Path(str(item.path)))
    given = {tier for tier in TIERS if item.get_closest_marker(tier)} | {placed} - {None}
    if len(given) > 1:
        raise pytest.UsageError(f"{item.nodeid} is given more than one tier: {sorted(given)}")
    if given:
        return given.pop()
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & INTEROP_FIXTURES:
        return "interop"
    if fixtures & JOBS_FIXTURES or item.get_closest_marker("slow"):
        return "jobs"
    return "integration" if fixtures & INTEGRATION_FIXTURES else "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier (`-m unit`, `-m "unit or integration"`, ...); skip the
    tests marked `gpu` where torch sees no CUDA device."""
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
    needs_gpu = [item for item in items if item.get_closest_marker("gpu")]
    if needs_gpu and not cuda_available():
        skip = pytest.mark.skip(reason="needs CUDA, which torch does not see here "
                                       "(tests/gpu/run.sh runs these where it does)")
        for item in needs_gpu:
            item.add_marker(skip)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (imported only when a `gpu` test is collected)."""
    import torch

    return torch.cuda.is_available()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip importing a file whose place decides its tier when `-m`, an expression of tier
    names alone, selects none of its tests (the SDK's and torch's imports cost the unit tier
    seconds); any other `-m` collects everything as usual."""
    tier = folder_tier(collection_path) if collection_path.is_relative_to(TESTS) else None
    return True if tier and not selects(config.option.markexpr, tier) else None


def selects(markexpr: str, tier: str) -> bool:
    """Whether `-m markexpr` can select a test of `tier` (True unless it names tiers only)."""
    tokens = re.findall(r"[()]|[^\s()]+", markexpr)
    if not tokens or any(t not in {*TIERS, "and", "or", "not", "(", ")"} for t in tokens):
        return True
    try:  # validated above: tier names, and/or/not and parentheses only
        return bool(eval(" ".join(tokens), {"__builtins__": {}}, {t: t == tier for t in TIERS}))
    except SyntaxError:
        return True  # pytest reports the bad expression itself


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server in this process, reachable over HTTP by the processes a test starts."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point boto3 (here and in child processes) at the moto server with fake credentials."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    return moto_endpoint


@pytest.fixture
def s3_bucket(aws_env: str) -> str:
    """A new, empty bucket on the moto server."""
    import boto3

    name = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=name)
    return name
