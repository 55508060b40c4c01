"""Public SageMaker notebooks' estimator calls, with `from ddpjob import PyTorch`: each builds a
valid CreateTrainingJob request (the dry run), and the dry run calls no AWS API.

The corpus (corpus/sagemaker_examples.py) cites where each call comes from. The session is a
ddpjob.Session on fake credentials whose every HTTP request raises, so a built request proves
that nothing was sent (calls for `local`/`local_gpu` get a LocalSession in a temporary home,
as the official SDK gives them its local session: a dry run asks nothing of this machine).

How many build: `python -m pytest -q tests/interop/test_corpus.py -k call_builds` (74 of 74;
68 before the fixes of issue 17).
"""

from __future__ import annotations

import importlib.util
import subprocess
import warnings
from pathlib import Path
from typing import Any

import boto3
import pytest
from ddpjob import PyTorch
from ddpjob.local.session import LOCAL_IMAGE
from ddpjob.request import validate_request
from ddpjob.sagemaker.session import Session

CORPUS_FILE = Path(__file__).parent / "corpus" / "sagemaker_examples.py"


def _corpus() -> Any:
    spec = importlib.util.spec_from_file_location("sagemaker_examples", CORPUS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CORPUS = _corpus()


class AwsCalled(AssertionError):
    """An HTTP request left the dry run."""


def offline_session() -> Session:
    """A Session on fake credentials in us-east-1 whose HTTP requests fail the test. Its
    default bucket is named (as a notebook's `default_bucket` is): otherwise naming it would
    look the account up (STS), the one read a dry run may make."""
    boto = boto3.Session(region_name="us-east-1", aws_access_key_id="fake",
                         aws_secret_access_key="fake")

    def refuse(request: Any, **_: Any) -> None:
        raise AwsCalled(f"the dry run sent {request.method} {request.url}")

    boto.events.register("before-send", refuse)
    return Session(boto, default_bucket="sagemaker-us-east-1-corpus")


def _materialise(kwargs: dict[str, Any], workspace: Path) -> None:
    """Create the call's source_dir / entry_point / dependencies under `workspace/notebook`."""
    notebook = workspace / "notebook"
    source = kwargs.get("source_dir")
    folder = notebook / source if isinstance(source, str) and "://" not in source else notebook
    folder.mkdir(parents=True, exist_ok=True)
    entry = folder / kwargs.get("entry_point", "train.py")
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text("print('training')\n")
    for dependency in kwargs.get("dependencies") or []:
        (notebook / dependency).mkdir(parents=True, exist_ok=True)


def _git_repository(kwargs: dict[str, Any], workspace: Path) -> dict[str, str]:
    """A local bare repository with the call's source_dir and entry point (for git_config)."""
    work = workspace / "repo-work"
    _materialise({**kwargs, "dependencies": None}, work)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    content = work / "notebook"
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=content, check=True)
    subprocess.run([*git, "add", "."], cwd=content, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "code"], cwd=content, check=True)
    bare = workspace / "repo.git"
    subprocess.run([*git, "clone", "-q", "--bare", str(content), str(bare)], check=True)
    return {"repo": str(bare), "branch": "main"}


def _resolve(kwargs: dict[str, Any], session: Session, workspace: Path) -> dict[str, Any]:
    values = {}
    for name, value in kwargs.items():
        if value == CORPUS.SESSION:
            value = session
        elif value == CORPUS.GIT_CONFIG:
            value = _git_repository(kwargs, workspace)
        elif value == CORPUS.RULES:
            value = ["a Debugger rule"]
        values[name] = value
    return values


def build(call: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The dry run of `call` with ddpjob's PyTorch (raising what ddpjob raises)."""
    session = offline_session()
    monkeypatch.setenv("DDPJOB_HOME", str(workspace / "home"))  # local calls' LocalSession
    kwargs = _resolve(call.kwargs, session, workspace)
    if "git_config" not in kwargs:
        _materialise(kwargs, workspace)
    monkeypatch.chdir(workspace.joinpath("notebook") if (workspace / "notebook").exists()
                      else workspace)
    if kwargs.get("instance_type") not in ("local", "local_gpu"):  # local: a LocalSession
        kwargs.setdefault("sagemaker_session", session)
    with warnings.catch_warnings():  # v1 names and ignored arguments warn (test_arguments)
        warnings.simplefilter("ignore", DeprecationWarning)
        estimator = PyTorch(**kwargs)
    return estimator.training_job_request()


@pytest.mark.parametrize("call", CORPUS.CALLS,
                         ids=[f"{i:02d}-{Path(c.path).stem}" for i, c in enumerate(CORPUS.CALLS)])
def test_call_builds_a_request(call: Any, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    request = build(call, tmp_path, monkeypatch)
    validate_request(request)
    assert request["AlgorithmSpecification"]["TrainingImage"].startswith(
        ("763104351884.dkr.ecr.", "658645717510.dkr.ecr.", "123456789012.dkr.ecr.",
         LOCAL_IMAGE))
    assert request["RoleArn"] == CORPUS.ROLE


def test_corpus_size_and_sources() -> None:
    assert len(CORPUS.CALLS) >= 30  # each builds: test_call_builds_a_request
    assert all(call.path for call in CORPUS.CALLS)
