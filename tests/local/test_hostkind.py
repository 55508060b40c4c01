"""Host kinds (`hostkind`): which kind each request gets, and every kind's answers to the
checks, the supervisor and the hosts; no job runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from ddpjob.local.base.templates import SWITCH_ENV
from ddpjob.local.hostkinds import container_host, dlc_host, hostkind, hostpython
from ddpjob.local.hostkinds.hostkind import CONTAINER, DLC, RUNTIME
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession
from ddpjob.local.warmpools import pools
from ddpjob_runtime.shared import contract

from tests.local.conftest import training_request

DLC_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311"
GPU_DLC_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311"
HF_IMAGE = ("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:"
            "2.1.0-transformers4.36.0-gpu-py310-cu121-ubuntu20.04")
SMP_IMAGE = "658645717510.dkr.ecr.us-west-2.amazonaws.com/pytorch-smp:2.4.1-gpu-py311-cu121"
DRIVERS = ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && "
                 "/opt/ml/input/data/sm_drivers/sm_train.sh"]


def _request(session: LocalSession, image: str = "ddpjob:local", hosts: int = 1,
             **algorithm: Any) -> dict[str, Any]:
    request = training_request(session, "kinds", "file:///tmp/sourcedir.tar.gz", "train.py",
                               hosts=hosts)
    request["AlgorithmSpecification"].update(TrainingImage=image, **algorithm)
    return request


@pytest.mark.parametrize(
    ("image", "algorithm", "kind"),
    [
        ("ddpjob:local", {}, RUNTIME),
        (DLC_IMAGE, {}, DLC),
        (HF_IMAGE, {}, DLC),
        # The model-parallel DLC needs SageMaker's cluster: its hosts run ddpjob's runtime.
        (SMP_IMAGE, {}, RUNTIME),
        ("ddpjob:local", {"ContainerEntrypoint": ["/bin/bash"], "ContainerArguments": DRIVERS},
         CONTAINER),
        # A container command wins over the image, the DLC's too.
        (DLC_IMAGE, {"ContainerEntrypoint": ["/bin/bash"]}, CONTAINER),
        # Arguments alone name no command.
        ("ddpjob:local", {"ContainerArguments": DRIVERS}, RUNTIME),
        (DLC_IMAGE, {"ContainerArguments": DRIVERS}, DLC),
    ],
)
def test_each_request_gets_one_kind(session: LocalSession, image: str,
                                    algorithm: dict[str, Any], kind: hostkind.HostKind) -> None:
    assert hostkind.of(_request(session, image, **algorithm)) is kind


@pytest.mark.parametrize(
    ("kind", "image_program", "needs_program", "needs_local_torch", "module"),
    [
        (RUNTIME, False, True, True, None),
        (DLC, True, True, False, dlc_host.MODULE),
        (CONTAINER, True, False, True, container_host.MODULE),
    ],
)
def test_what_each_kind_answers(kind: hostkind.HostKind, image_program: bool,
                                needs_program: bool, needs_local_torch: bool,
                                module: str | None, monkeypatch: pytest.MonkeyPatch,
                                tmp_path: Path) -> None:
    assert kind.runs_image_program is image_program
    # ddpjob's runtime has its inputs staged once per job and its checkpoint restaged on a
    # retry; an image's program stages and restores its own on every host.
    assert kind.stages_once is not image_program
    assert kind.restores_own_checkpoints is image_program
    assert kind.on_fixed_port(1) is False
    assert kind.on_fixed_port(2) is image_program
    assert kind.needs_program is needs_program
    assert kind.needs_local_torch is needs_local_torch
    expected = None if module is None else [sys.executable, "-m", module, str(tmp_path), "algo-2"]
    assert kind.host_command(tmp_path, "algo-2") == expected
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    assert kind.forks_from_template() is (not image_program and sys.platform == "linux")
    monkeypatch.setenv(SWITCH_ENV, "0")
    assert kind.forks_from_template() is False


def test_a_pool_of_the_runtime_never_takes_a_job_of_an_image_program(
    session: LocalSession, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kind's part of a pool's key: whether the pool holds a template."""
    monkeypatch.delenv(SWITCH_ENV, raising=False)
    runtime = _request(session)
    command = _request(session, ContainerEntrypoint=["/bin/bash"])
    for request in (runtime, command):
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 60

    def key(request: dict[str, Any]) -> str | None:
        return pools.match_key(request, hostkind.of(request).forks_from_template())

    assert None not in (key(runtime), key(command)) and key(runtime) != key(command)
    monkeypatch.setenv(SWITCH_ENV, "0")  # no template: the runtime's pool holds none either
    assert key(runtime) == key(command)


ARGUMENTS_ALONE = "ContainerArguments without ContainerEntrypoint"


def test_the_runtimes_refusals(session: LocalSession) -> None:
    assert RUNTIME.problem(_request(session)) is None
    assert ARGUMENTS_ALONE in RUNTIME.problem(_request(session, ContainerArguments=DRIVERS))


def test_the_dlcs_refusals(session: LocalSession, monkeypatch: pytest.MonkeyPatch) -> None:
    assert DLC.problem(_request(session, DLC_IMAGE)) is None
    assert ARGUMENTS_ALONE in DLC.problem(_request(session, DLC_IMAGE, ContainerArguments=DRIVERS))
    gpu = _request(session, GPU_DLC_IMAGE)
    gpu["ResourceConfig"]["InstanceType"] = "ml.p3.2xlarge"
    assert "with the GPU image '2.5.1-gpu-py311'" in DLC.problem(gpu)
    mpi = _request(session, DLC_IMAGE, hosts=2)
    mpi["HyperParameters"][contract.MPI] = "true"
    assert "'mpi' over several hosts needs sshd" in DLC.problem(mpi)
    monkeypatch.setenv(hostpython.PYTHON_ENV, "/bin/false")  # a Python without the toolkits
    assert f"{hostpython.PYTHON_ENV}=/bin/false lacks them" in DLC.problem(
        _request(session, DLC_IMAGE))


@pytest.mark.parametrize(
    ("program", "words"),
    [
        ("", "ContainerEntrypoint[0] is empty"),
        ("no-such-program-here", "no such program on this machine's PATH"),
        ("bin/bash", "a relative path names nothing on a local host"),
        ("/etc/passwd", "not an executable file on this machine"),
    ],
)
def test_the_container_commands_refusals(session: LocalSession, program: str,
                                         words: str) -> None:
    request = _request(session, ContainerEntrypoint=[program], ContainerArguments=DRIVERS)
    assert words in CONTAINER.problem(request)


def test_a_container_command_needs_a_namespace_per_host(session: LocalSession) -> None:
    request = _request(session, ContainerEntrypoint=["/bin/bash"], ContainerArguments=DRIVERS)
    reason = sandbox.available()
    if reason is None:
        assert CONTAINER.problem(request) is None
    else:
        assert f"this machine gives none: {reason}" in CONTAINER.problem(request)
