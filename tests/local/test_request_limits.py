"""Requests sent straight to the local client are checked there, whoever built them.

SageMaker's own limits from botocore's service model (lengths, counts, patterns, enums), what
local hosts can run (host count, channel folders, the container command), each refused in one
line naming the member, before anything of the job is written or started.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from botocore.exceptions import ClientError, ParamValidationError
from ddpjob.local.control import model_limits, validation
from ddpjob.local.isolation import sandbox
from ddpjob.local.session import LocalSession
from ddpjob.request import service_model

from tests.conftest import HOST_NAMESPACES
from tests.local.conftest import training_request

ENTRYPOINT = ["/bin/bash"]
ARGUMENTS = ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && "
                   "/opt/ml/input/data/sm_drivers/sm_train.sh"]


def _request(session: LocalSession, **changes: Any) -> dict[str, Any]:
    source = (session.home.parent / "missing" / "sourcedir.tar.gz").as_uri()
    request = training_request(session, "limits", source, "train.py")
    for member, value in changes.items():
        parent, _, child = member.rpartition(".")
        (request[parent] if parent else request)[child] = value
    return request


def _channel(name: str, uri: str = "file:///tmp/data") -> dict[str, Any]:
    return {"ChannelName": name,
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri}}}


def _refused(session: LocalSession, request: dict[str, Any]) -> str:
    """The one-line ValidationException the client answers; nothing of the job exists."""
    with pytest.raises(ClientError) as raised:
        session.sagemaker_client.create_training_job(**request)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    message = raised.value.response["Error"]["Message"]
    assert "\n" not in message
    assert not session.job_dir(request["TrainingJobName"]).exists()
    return message


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        # SageMaker's Environment limits: 100 entries, names and values of at most 512.
        ({"Environment": {f"V{i}": "1" for i in range(101)}},
         "Environment: 101 entries, SageMaker allows at most 100"),
        ({"Environment": {"BIG": "x" * 300_000}},
         "Environment['BIG'] 'xxxx"),
        ({"Environment": {"BIG": "x" * 513}}, "513 characters, SageMaker allows at most 512"),
        ({"Environment": {"NOT-A-NAME": "1"}},
         "Environment key 'NOT-A-NAME': must match SageMaker's pattern [a-zA-Z_][a-zA-Z0-9_]*"),
        ({"Environment": {"A": "x\x00y"}}, "Environment['A'] 'x\\x00y': contains a NUL"),
        # The container command: items and lengths of the model, then what can start here.
        ({"AlgorithmSpecification.ContainerEntrypoint": ["/bin/bash"] * 101},
         "AlgorithmSpecification.ContainerEntrypoint: 101 items, SageMaker allows at most 100"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["/bin/bash"],
          "AlgorithmSpecification.ContainerArguments": ["-c", "x" * 257]},
         "AlgorithmSpecification.ContainerArguments[1] 'xxx"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["/bin/bash"],
          "AlgorithmSpecification.ContainerArguments": ["-c", "echo 1\nrm -rf ~"]},
         "AlgorithmSpecification.ContainerArguments[1] 'echo 1\\nrm -rf ~': must match"),
        ({"AlgorithmSpecification.ContainerEntrypoint": [""]},
         "ContainerEntrypoint[0] is empty"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["  "]},
         "ContainerEntrypoint[0] is empty"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["../../bin/sh"]},
         "a relative path names nothing on a local host"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["/no/such/program"]},
         "'/no/such/program': not an executable file on this machine"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["/etc/passwd"]},
         "not an executable file"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["no-such-program-here"]},
         "no such program on this machine's PATH"),
        ({"AlgorithmSpecification.ContainerEntrypoint": ["/bin/bash\x00"]}, "contains a NUL"),
        ({"AlgorithmSpecification.ContainerArguments": ARGUMENTS},
         "ContainerArguments without ContainerEntrypoint"),
        # Enums and patterns of the model, and NUL anywhere.
        ({"AlgorithmSpecification.TrainingInputMode": "Stream"},
         "AlgorithmSpecification.TrainingInputMode 'Stream': must be one of Pipe, File"),
        ({"RoleArn": "my-role-name-long-enough"}, "RoleArn 'my-role-name-long-enough': must match"),
        ({"AlgorithmSpecification.TrainingImage": "x" * 256}, "256 characters"),
        ({"HyperParameters": {"sagemaker_program": '"t.py"', "bad": "a\x00b"}},
         "HyperParameters['bad'] 'a\\x00b': contains a NUL"),
        # Hosts: what this machine can run.
        ({"ResourceConfig.InstanceCount": 10_000}, "ResourceConfig.InstanceCount 10000: this "
                                                   "machine runs at most"),
        ({"ResourceConfig.InstanceCount": 255}, "at most 254, the loopback addresses"),
    ],
)
def test_limits_are_one_line_each_before_anything_starts(
    session: LocalSession, changes: dict[str, Any], words: str
) -> None:
    assert words in _refused(session, _request(session, **changes))


@pytest.mark.parametrize(
    ("channels", "words"),
    [
        # `..` was staged into the job's own folder and overwrote its request.json; `.` failed
        # the job late.
        ([_channel("..")], "channel '..': a channel name must name a folder in input/data"),
        ([_channel(".")], "channel '.': a channel name must name a folder"),
        ([_channel("a/b")], "InputDataConfig[0].ChannelName 'a/b': must match"),
        ([_channel("train"), _channel("train")], "channel 'train' is given twice"),
        ([_channel("x" * 65)], "65 characters, SageMaker allows at most 64"),
        ([_channel(f"c{i}") for i in range(21)], "InputDataConfig: 21 items, SageMaker allows "
                                                 "at most 20"),
    ],
)
def test_channel_names_stay_in_input_data(
    session: LocalSession, channels: list[dict[str, Any]], words: str
) -> None:
    assert words in _refused(session, _request(session, InputDataConfig=channels))


def test_the_host_bound_is_the_machines_and_said(session: LocalSession) -> None:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    expected = min(254, memory // (512 * 2**20))
    assert validation.max_local_hosts() == expected
    message = _refused(session, _request(session, **{
        "ResourceConfig.InstanceCount": expected + 1}))
    assert f"at most {expected} local hosts (one per 512 MiB of its" in message


def test_sagemaker_program_stays_required_without_a_container_command(
    session: LocalSession,
) -> None:
    request = _request(session, HyperParameters={"epochs": "1"})
    assert "sagemaker_program" in _refused(session, request)


def test_local_mode_widens_only_instance_types_and_uris() -> None:
    """`local`/`local_gpu` and file:// URIs pass the model's limits; nothing else is widened,
    and every pattern Python cannot read is on a member local mode ignores."""
    shape = service_model().operation_model("CreateTrainingJob").input_shape
    request = {"ResourceConfig": {"InstanceType": "local_gpu"},
               "OutputDataConfig": {"S3OutputPath": "file:///tmp/out"}}
    assert model_limits.first_violation(shape, request) is None
    unreadable: set[str] = set()

    def walk(node: Any, path: str, seen: tuple[str, ...] = ()) -> None:
        if node.name in seen:
            return
        source = node.metadata.get("pattern")
        if source is not None and model_limits._pattern(source) is None:
            unreadable.add(path)
        children = {"structure": lambda: node.members.items(),
                    "list": lambda: [("[]", node.member)],
                    "map": lambda: [("{key}", node.key), ("{value}", node.value)]}
        for name, child in children.get(node.type_name, list)():
            walk(child, f"{path}.{name}", (*seen, node.name))

    walk(shape, "")
    assert unreadable <= {".Tags.[].Key", ".Tags.[].Value",
                          ".AlgorithmSpecification.TrainingImageConfig."
                          "TrainingRepositoryAuthConfig.TrainingRepositoryCredentialsProviderArn"}


def _container_request(session: LocalSession) -> dict[str, Any]:
    request = _request(session, **{"AlgorithmSpecification.ContainerEntrypoint": ENTRYPOINT,
                                   "AlgorithmSpecification.ContainerArguments": ARGUMENTS,
                                   "ResourceConfig.InstanceType": "ml.m5.xlarge"})
    request["HyperParameters"] = {"epochs": "3"}  # plain strings, no sagemaker_program
    return request


def test_a_container_command_needs_hosts_with_their_own_opt_ml(
    session: LocalSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sandbox.SWITCH_ENV, "0")
    message = _refused(session, _container_request(session))
    assert message.startswith("AlgorithmSpecification.ContainerEntrypoint: a container command "
                              "needs each local host in its own mount namespace")
    assert f"{sandbox.SWITCH_ENV}=0 turns them off" in message


@HOST_NAMESPACES
def test_a_container_command_needs_no_sagemaker_program(session: LocalSession) -> None:
    request = _container_request(session)
    assert session.submit_dryrun(request)["AlgorithmSpecification"]["ContainerEntrypoint"] == \
        ENTRYPOINT
    assert not session.home.exists()  # a dry run writes nothing


@pytest.mark.parametrize("entrypoint", [[1], "/bin/bash", [None], []])
def test_an_entrypoint_that_is_no_list_of_strings_is_botocores_error(
    session: LocalSession, entrypoint: Any
) -> None:
    request = _request(session, **{"AlgorithmSpecification.ContainerEntrypoint": entrypoint})
    with pytest.raises(ParamValidationError, match=r"AlgorithmSpecification\.ContainerEntrypoint"):
        session.sagemaker_client.create_training_job(**request)
    assert not session.job_dir("limits").exists()
