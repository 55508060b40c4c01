"""The container contract without processes: reading the root, rendering SM_*, commands, tars."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ddpjob_runtime.job import launcher, worker
from ddpjob_runtime.job.entrypoint import EntryKind, check_entry_point, entry_kind
from ddpjob_runtime.platform import hosts, sm_variables, sourcedir
from ddpjob_runtime.platform.environment import read_environment
from ddpjob_runtime.shared import failure, phases
from ddpjob_runtime.shared.errors import RuntimeContractError
from ddpjob_runtime.shared.platform_config import PlatformConfig

USER_HPS = {
    "lr": "0.01",
    "backend": '"gloo"',
    "my-flag": "true",
    "x": "[1, 2]",
    "d": '{"b": 2, "a": 1}',
    "name": "plain words",
    "e": "3",
}
SAGEMAKER_HPS = {
    "sagemaker_program": '"train.py"',
    "sagemaker_container_log_level": "20",
    "sagemaker_submit_directory": '"file:///src/sourcedir.tar.gz"',
    "sagemaker_torch_distributed_enabled": "true",
    "sagemaker_region": '"eu-west-1"',
}
RESOURCES = {
    "current_host": "algo-2",
    "hosts": ["algo-1", "algo-2"],
    "network_interface_name": "eth0",
    "current_instance_type": "ml.g5.xlarge",
    "current_group_name": "homogeneousCluster",
    "instance_groups": [
        {
            "instance_group_name": "homogeneousCluster",
            "instance_type": "ml.g5.xlarge",
            "hosts": ["algo-1", "algo-2"],
        }
    ],
}


def make_root(root: Path, hps: dict, resources: dict = RESOURCES, **extra: object) -> Path:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    files = {
        "hyperparameters.json": hps,
        "resourceconfig.json": resources,
        "inputdataconfig.json": {"training": {"TrainingInputMode": "File"}, "test": {}},
        **extra,
    }
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (config / (name if name.endswith(".json") else f"{name}.json")).write_text(text)
    return root


def test_hyperparameters_are_json_decoded_with_raw_fallback(tmp_path: Path) -> None:
    env = read_environment(make_root(tmp_path, {**USER_HPS, **SAGEMAKER_HPS}))
    assert env.hyperparameters["lr"] == 0.01
    assert env.hyperparameters["backend"] == "gloo"
    assert env.hyperparameters["name"] == "plain words"  # not JSON: kept as it came
    assert env.hyperparameters["d"] == {"a": 1, "b": 2}
    deep = "[" * 2000  # within SageMaker's 2,500 characters, deeper than json's recursion
    assert read_environment(make_root(tmp_path / "deep", {"deep": deep})).hyperparameters[
        "deep"] == deep
    assert env.current_host == "algo-2" and env.host_index == 1 and not env.is_master
    assert env.entry_point == "train.py"
    assert env.platform == PlatformConfig() and env.checkpoint_dir == tmp_path / "checkpoints"


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("hyperparameters.json", "{not json", "not valid JSON"),
        ("hyperparameters.json", "[1, 2]", "expected a JSON object"),
        ("resourceconfig.json", {"current_host": "algo-3", "hosts": ["algo-1"]}, "current_host"),
        ("resourceconfig.json", {"current_host": "algo-1", "hosts": []}, "'hosts'"),
        ("platform.json", '{"job_name": ', "not valid JSON"),
    ],
)
def test_bad_config_files_name_the_file_and_problem(
    tmp_path: Path, name: str, content: object, problem: str
) -> None:
    make_root(tmp_path, SAGEMAKER_HPS)
    path = tmp_path / "input" / "config" / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(RuntimeContractError, match=problem) as info:
        read_environment(tmp_path)
    assert name in str(info.value)


def test_missing_resourceconfig_is_named(tmp_path: Path) -> None:
    make_root(tmp_path, SAGEMAKER_HPS)
    (tmp_path / "input" / "config" / "resourceconfig.json").unlink()
    with pytest.raises(RuntimeContractError, match="resourceconfig.json: required file"):
        read_environment(tmp_path)


def test_checkpoint_local_path_under_opt_ml_maps_into_the_root(tmp_path: Path) -> None:
    config = {"LocalPath": "/opt/ml/checkpoints/run", "S3Uri": "s3://b/c"}
    env = read_environment(make_root(tmp_path, SAGEMAKER_HPS, checkpointconfig=config))
    assert env.checkpoint_dir == tmp_path / "checkpoints" / "run"


@pytest.mark.parametrize("local_path", ["/opt/ml/../..", "/opt/ml/checkpoints/../../x", "/tmp/ckpt",
                                        "/opt/ml", "checkpoints"])
def test_checkpoint_local_path_that_would_leave_the_host_is_refused(
        tmp_path: Path, local_path: str) -> None:
    config = {"LocalPath": local_path, "S3Uri": "s3://b/c"}
    root = make_root(tmp_path, SAGEMAKER_HPS, checkpointconfig=config)
    with pytest.raises(RuntimeContractError, match=r"^CheckpointConfig.LocalPath .* refused: "):
        read_environment(root)


def test_tensorboard_local_path_that_would_leave_the_host_is_refused(tmp_path: Path) -> None:
    root = make_root(tmp_path, SAGEMAKER_HPS)
    (root / "input" / "config" / "platform.json").write_text(json.dumps(
        {"tensorboard_output_config": {"LocalPath": "/opt/ml/output/../../../..",
                                       "S3OutputPath": "s3://b/tb"}}))
    with pytest.raises(RuntimeContractError, match="TensorBoardOutputConfig.LocalPath"):
        read_environment(root)


def _toolkit_variables(root: Path) -> dict[str, str]:
    """What SageMaker's own training toolkit exports for the same root (in a clean process)."""
    code = (
        "import json; from sagemaker_training import environment as e; "
        "print(json.dumps(e.Environment().to_env_vars()))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "TRAINING_JOB"))}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "SAGEMAKER_BASE_DIR": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_sm_variables_equal_the_training_toolkits(tmp_path: Path, monkeypatch) -> None:
    for name in [k for k in os.environ if k.startswith(("SM_", "TRAINING_JOB"))]:
        monkeypatch.delenv(name)
    root = make_root(tmp_path, {**USER_HPS, **SAGEMAKER_HPS})
    expected = _toolkit_variables(root)
    ours = sm_variables.render(read_environment(root), gpus=0)
    assert ours == expected
    # spot checks of the formats, for the reader
    assert ours["SM_HOSTS"] == '["algo-1","algo-2"]'
    assert ours["SM_HP_LR"] == "0.01" and ours["SM_HP_BACKEND"] == "gloo"
    assert ours["SM_HP_MY-FLAG"] == "true"
    assert ours["SM_USER_ARGS"] == json.dumps(
        [
            "--backend",
            "gloo",
            "-d",
            "a=1,b=2",
            "-e",
            "3",
            "--lr",
            "0.01",
            "--my-flag",
            "True",
            "--name",
            "plain words",
            "-x",
            "[1, 2]",
        ],
        separators=(",", ":"),
    )
    assert ours["SM_FRAMEWORK_PARAMS"] == '{"sagemaker_torch_distributed_enabled":true}'


def test_ddpjob_hyperparameters_are_reserved(tmp_path: Path) -> None:
    hps = {**SAGEMAKER_HPS, "lr": "0.1", "ddpjob_processes_per_host": "2"}
    env = read_environment(make_root(tmp_path, hps))
    rendered = sm_variables.render(env, gpus=0)
    assert json.loads(rendered["SM_HPS"]) == {"lr": 0.1}
    assert json.loads(rendered["SM_USER_ARGS"]) == ["--lr", "0.1"]
    assert "SM_HP_DDPJOB_PROCESSES_PER_HOST" not in rendered
    assert json.loads(rendered["SM_FRAMEWORK_PARAMS"])["ddpjob_processes_per_host"] == 2


@pytest.mark.parametrize("name", ["a=b", "a\x00b"])
def test_hyperparameter_names_no_env_variable_can_carry_are_refused(tmp_path: Path,
                                                                    name: str) -> None:
    """Another client may write such a name: a clear contract error, not an os.environ crash."""
    with pytest.raises(RuntimeContractError, match=r"hyperparameters.json: hyperparameter .* "
                                                   r"refused: names cannot contain '='"):
        read_environment(make_root(tmp_path, {**SAGEMAKER_HPS, name: "1"}))


@pytest.mark.parametrize("channel", [".", "..", "a/../..", "/etc"])
def test_channel_names_stay_inside_input_data(tmp_path: Path, channel: str) -> None:
    env = read_environment(make_root(tmp_path, SAGEMAKER_HPS))
    with pytest.raises(RuntimeContractError, match="channel name .* refused"):
        env.channel_dir(channel)
    assert env.channel_dir("train") == env.root / "input" / "data" / "train"


def test_strategy_and_processes_per_host() -> None:
    assert (
        launcher.choose_strategy({"sagemaker_pytorch_ddp_enabled": True})
        is launcher.Strategy.TORCHRUN
    )
    assert (
        launcher.choose_strategy({"sagemaker_distributed_dataparallel_enabled": "true"})
        is launcher.Strategy.TORCHRUN
    )  # noqa: E501
    assert launcher.choose_strategy({"sagemaker_mpi_enabled": True}) is launcher.Strategy.MPI
    assert launcher.choose_strategy({"sagemaker_mpi_enabled": False}) is launcher.Strategy.SINGLE
    assert launcher.processes_per_host({"ddpjob_processes_per_host": 3}, gpus=8) == 3
    assert launcher.processes_per_host({}, gpus=4) == 4
    assert launcher.processes_per_host({}, gpus=0) == 1
    with pytest.raises(RuntimeContractError, match="ddpjob_processes_per_host"):
        launcher.processes_per_host({"ddpjob_processes_per_host": "two"}, gpus=0)


def test_the_launch_is_one_short_line_in_the_log() -> None:
    torchrun = {"sagemaker_torch_distributed_enabled": True, "ddpjob_processes_per_host": 2}
    assert launcher.summary(torchrun, 0, 2, "algo-1") == \
        "starting 2 processes on algo-1 (torchrun, CPU)"
    assert launcher.summary({"sagemaker_pytorch_ddp_enabled": "true"}, 1, 1, "algo-2") == \
        "starting 1 process on algo-2 (torchrun, 1 GPU)"
    assert launcher.summary({"sagemaker_mpi_enabled": True}, 4, 2, "algo-1") == \
        "starting 8 processes on 2 hosts from algo-1 (mpirun, 4 GPUs)"
    assert launcher.summary({}, 0, 3, "algo-3") == "starting 1 process on algo-3 (CPU)"


def test_torchrun_command() -> None:
    cmd = launcher.torchrun_command(
        nnodes=2,
        node_rank=1,
        nproc=4,
        master_addr="10.0.0.1",
        master_port=7777,
        entry="train.py",
        args=["--lr", "0.1"],
    )
    assert cmd[:3] == [sys.executable, "-m", "ddpjob_runtime.job.agent"]
    assert cmd[3:] == [
        "--nnodes=2",
        "--node_rank=1",
        "--nproc_per_node=4",
        "--master_addr=10.0.0.1",
        "--master_port=7777",
        "--max_restarts=0",
        "--tee=3",
        "-m",
        "ddpjob_runtime.job.worker",
        "train.py",
        "--lr",
        "0.1",
    ]


def test_mpirun_absent_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(
        RuntimeContractError, match="mpirun, which is not installed.*torch_distributed"
    ):
        launcher.mpirun_command(
            host_addresses=["a"], nproc=1, master_addr="a", master_port=1, entry="train.py", args=[]
        )


def test_entry_point_kinds_and_checks(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    assert entry_kind(tmp_path, "train.py") is EntryKind.PYTHON_SCRIPT
    assert entry_kind(tmp_path, "run.sh") is EntryKind.COMMAND
    assert check_entry_point(tmp_path, "train.py") is EntryKind.PYTHON_SCRIPT
    with pytest.raises(RuntimeContractError, match="'missing.py' not found.*train.py"):
        check_entry_point(tmp_path, "missing.py")
    with pytest.raises(RuntimeContractError, match="outside"):
        check_entry_point(tmp_path, "../train.py")
    (tmp_path / "setup.py").write_text("")
    assert entry_kind(tmp_path, "pkg/train.py") is EntryKind.PYTHON_MODULE


def test_master_address_from_platform_and_dns_retry(tmp_path: Path) -> None:
    platform = {"host_addresses": {"algo-1": "10.1.1.1"}, "master_port": 29517}
    env = read_environment(make_root(tmp_path, SAGEMAKER_HPS, platform=platform))
    assert hosts.master_address(env) == ("10.1.1.1", 29517)
    answers = iter([OSError("not yet"), OSError("not yet"), "10.2.2.2"])

    def lookup(_host: str) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert hosts.resolve("algo-9", lookup=lookup) == "10.2.2.2"
    with pytest.raises(RuntimeContractError, match="did not resolve"):
        hosts.resolve("no-such-host.invalid", deadline_s=0.0)


def test_master_name_is_what_sagemakers_container_exports_without_a_lookup(
        tmp_path: Path) -> None:
    """Every job's MASTER_ADDR/MASTER_PORT: the first host's name and 7777 on SageMaker (as
    its PyTorch container sets them; a name that does not resolve here is not waited for),
    platform.json's address and port on a local host."""
    on_sagemaker = read_environment(make_root(tmp_path / "sm", SAGEMAKER_HPS))
    assert hosts.master_name(on_sagemaker) == ("algo-1", 7777)
    platform = {"host_addresses": {"algo-1": "127.0.0.1"}, "master_port": 29517}
    local = read_environment(make_root(tmp_path / "local", SAGEMAKER_HPS, platform=platform))
    assert hosts.master_name(local) == ("127.0.0.1", 29517)


def _tar(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("ok.py"), io.BytesIO(b""))
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_member("/etc/evil"), "absolute path"),
        (_member("../evil"), r"'\.\.'"),
        (_member("sub/../../evil"), r"'\.\.'"),
        (_member("link", tarfile.SYMTYPE, "/etc/passwd"), "points outside"),
        (_member("sub/link", tarfile.SYMTYPE, "../../x"), "points outside"),
        (_member("hard", tarfile.LNKTYPE, "../x"), "points outside"),
        (_member("dev", tarfile.CHRTYPE), "devices"),
    ],
)
def test_unsafe_archive_members_are_refused(tmp_path: Path, member, why: str) -> None:
    archive = _tar(tmp_path / "src.tar.gz", member)
    with pytest.raises(RuntimeContractError, match=why) as info:
        sourcedir.safe_extract(archive, tmp_path / "code")
    assert repr(member.name) in str(info.value)
    assert not (tmp_path / "code" / "ok.py").exists()  # nothing unpacked at all


CHAIN = (_member("a/b", tarfile.DIRTYPE), _member("a/b/s2", tarfile.SYMTYPE, "../.."),
         _member("s1", tarfile.SYMTYPE, "a/b/s2/.."))


@pytest.mark.parametrize(("members", "refused"), [
    (CHAIN, "s1"),  # each link looks harmless alone; the chain ends above code/
    ((*CHAIN[:2], _member("h", tarfile.LNKTYPE, "a/b/s2/../etc/passwd")), "h"),
    ((*CHAIN, _member("h", tarfile.LNKTYPE, "s1/etc/passwd")), "s1"),
    ((_member("real.txt"), _member("in", tarfile.SYMTYPE, "."),
      _member("h", tarfile.LNKTYPE, "in/real.txt")), "h"),  # crashed with KeyError
    ((_member("up/evil.py"), _member("up", tarfile.SYMTYPE, "..")), "up/evil.py"),
])
def test_link_chains_out_of_the_archive_are_refused(tmp_path: Path, members, refused: str) -> None:
    archive = _tar(tmp_path / "src.tar.gz", *members)
    with pytest.raises(RuntimeContractError, match="points outside|resolves outside") as info:
        sourcedir.safe_extract(archive, tmp_path / "code")
    assert f"member {refused!r} refused" in str(info.value)
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["code", "src.tar.gz"]
    assert not any((tmp_path / "code").iterdir())  # nothing unpacked at all


def test_links_inside_the_archive_are_kept(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "src.tar.gz",
        _member("sub/data.txt"),
        _member("sub/alias", tarfile.SYMTYPE, "data.txt"),
    )
    sourcedir.safe_extract(archive, tmp_path / "code")
    assert (tmp_path / "code" / "sub" / "alias").read_text() == "x"


def test_failure_reason_puts_the_exception_first() -> None:
    text = failure.reason("algo-2", 3, 7, "ValueError: bad batch", "Traceback\n" + "  x\n" * 2000)
    assert text[:1024].startswith("host algo-2, rank 3, exit code 7: ValueError: bad batch")


def test_failure_records_pick_the_earliest(tmp_path: Path) -> None:
    failure.record(failure.RankFailure(2, 1, "RuntimeError: fallout", time=20.0), tmp_path)
    failure.record(failure.RankFailure(3, 5, "ValueError: cause", time=10.0), tmp_path)
    first = failure.first_failure(tmp_path)
    assert first is not None and (first.rank, first.exit_code) == (3, 5)


def test_phase_file_is_replaced_whole(tmp_path: Path) -> None:
    status = tmp_path / "algo-1.status"
    phases.write_phase(status, "Downloading")
    phases.write_phase(status, "Training")
    assert json.loads(status.read_text())["phase"] == "Training"
    assert [p.name for p in tmp_path.iterdir()] == ["algo-1.status"]
    with pytest.raises(ValueError, match="unknown phase"):
        phases.write_phase(status, "Sleeping")


def test_mpi_rank_variables_map_to_torchrun_names() -> None:
    environ = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    }
    worker.map_mpi_variables(environ)
    assert (
        environ["RANK"],
        environ["WORLD_SIZE"],
        environ["LOCAL_RANK"],
        environ["LOCAL_WORLD_SIZE"],
    ) == ("5", "8", "1", "4")
    pmi = {"PMI_RANK": "2", "PMI_SIZE": "3", "RANK": "9"}
    worker.map_mpi_variables(pmi)
    assert (pmi["RANK"], pmi["WORLD_SIZE"]) == ("9", "3")  # torchrun's own value wins


def test_on_sagemakers_own_root_a_container_path_is_taken_as_it_is() -> None:
    from ddpjob_runtime.platform.environment import mapped_path
    from ddpjob_runtime.shared.errors import UnsafePathError

    assert mapped_path(Path("/opt/ml"), "/tmp/ckpt") == Path("/tmp/ckpt")
    with pytest.raises(UnsafePathError, match="without '..'"):
        mapped_path(Path("/opt/ml"), "/opt/ml/../etc")
