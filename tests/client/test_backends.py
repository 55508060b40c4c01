"""The backend registry: one line per backend; the front ends ask it, never a backend package."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ddpjob import backends
from ddpjob.base_session import BaseSession
from ddpjob.errors import UserInputError


@pytest.mark.parametrize(("instance_type", "name"), [
    ("local", "local"), ("local_gpu", "local"), ("ml.g5.12xlarge", "sagemaker"),
    ("ml.m5.large", "sagemaker"), ("gpu", None), (3, None), (None, None),
])
def test_an_instance_type_names_its_backend(instance_type: object, name: str | None) -> None:
    backend = backends.for_instance_type(instance_type)
    assert (backend and backend.name) == name


@pytest.mark.parametrize("backend", backends.BACKENDS, ids=backends.NAMES)
def test_each_backend_is_a_session_that_runs_its_own_types(backend: backends.Backend) -> None:
    session_type = backend.session_type()
    assert issubclass(session_type, BaseSession) and backends.named(backend.name) is backend
    assert session_type.backend is backend  # its policy is its registry line
    example = backend.default_instance_type or f"{backend.type_prefix}m5.large"
    assert backends.for_instance_type(example) is backend


def test_an_unknown_backend_name_is_refused() -> None:
    with pytest.raises(UserInputError, match="backend 'k8s' is not known: use one of local, "):
        backends.named("k8s")


def test_the_front_ends_import_no_backend_package() -> None:
    code = ("import sys, ddpjob.estimator, ddpjob.config, ddpjob.cli; "
            "print(sorted(m for m in sys.modules if m.startswith(('ddpjob.local', "
            "'ddpjob.sagemaker.session'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
