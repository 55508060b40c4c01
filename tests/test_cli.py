"""The `ddpjob` command line: real CLI processes, real local jobs, SageMaker on the moto server.

End-to-end tests run `python -m ddpjob.cli` (or the `ddpjob` console script) as subprocesses
against a LocalSession home in a temporary folder, named by a config file (DDPJOB_CONFIG), so
nothing touches ~/.ddpjob. Bad-input tests call `ddpjob.cli.main` in-process and check the exit
code, the single stderr line, and that nothing was submitted or uploaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ddpjob.cli import main
from ddpjob.config import Config, load_config, merge_defaults, resolve_backend
from ddpjob.errors import UserInputError
from ddpjob.local.session import LocalSession

from tests.conftest import GROUP_TEARDOWN
from tests.local.conftest import (
    JOB_TIMEOUT_S,
    JOBS,
    assert_no_processes,
    processes_under,
    wait_for,
)

TINY = Path(__file__).parent / "cli" / "tiny_train.py"
NOOP = JOBS / "noop.py"
TORCHRUN = '{"torch_distributed": {"enabled": true}}'
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cpu"
CLI_TIMEOUT_S = 120  # a guard against a hung process, not a timing assertion
DEBUG = "DDPJOB_DEBUG"  # would let unexpected errors print tracebacks


# ---------------------------------------------------------------------------- helpers


def cli(*args: str, env: dict[str, str], cwd: Path | None = None,
        timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run `python -m ddpjob.cli ARGS` as its own process."""
    return subprocess.run([sys.executable, "-m", "ddpjob.cli", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=timeout)


def cli_env(config: Path) -> dict[str, str]:
    """This process's environment, with DDPJOB_CONFIG naming `config` and no DDPJOB_HOME."""
    env = {k: v for k, v in os.environ.items() if k not in ("DDPJOB_HOME", DEBUG)}
    return {**env, "DDPJOB_CONFIG": str(config)}


def one_line(stderr: str) -> str:
    """The single line of an error report (fails when there is not exactly one)."""
    lines = stderr.splitlines()
    assert len(lines) == 1 and stderr.endswith("\n"), f"expected one stderr line: {stderr!r}"
    assert lines[0].startswith("ddpjob"), lines[0]
    return lines[0]


def write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def local_jobs(home: Path) -> list[str]:
    """Names of the jobs a LocalSession with this home knows."""
    return [job["TrainingJobName"] for job in LocalSession(home).list()]


def assert_nothing_local(home: Path) -> None:
    """No job was submitted and nothing was written under the home (no code, no output)."""
    assert local_jobs(home) == []
    for folder in ("jobs", "output"):
        path = home / folder
        assert not path.exists() or not any(path.iterdir()), sorted(path.rglob("*"))


def kill_leftovers(home: Path) -> list[int]:
    """SIGKILL the processes of this home's jobs (only those); return their pids."""
    leftovers = processes_under(home)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return leftovers


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A local home named by a config file in DDPJOB_CONFIG (in-process and child processes)."""
    home = tmp_path / "home"
    config = write_yaml(tmp_path / "config.yaml", {"home": str(home)})
    monkeypatch.setenv("DDPJOB_CONFIG", str(config))
    monkeypatch.delenv("DDPJOB_HOME", raising=False)
    monkeypatch.delenv(DEBUG, raising=False)
    yield home
    leftovers = kill_leftovers(home)
    assert not leftovers, f"processes left behind by the test: {leftovers}"


# ---------------------------------------------------------------------------- end to end, local


class Finished:
    """One local job run through the CLI, shared by the read-only tests below."""

    def __init__(self, root: Path, run: subprocess.CompletedProcess):
        self.home = root / "home"
        self.env = cli_env(root / "config.yaml")
        self.run = run
        self.checkpoints = root / "ckpt"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Finished]:
    """`ddpjob run -f spec.yaml` with flags overriding the spec: 1 host x 1 worker, torchrun.

    The config's home is relative (to the config file); the spec's source_dir is relative (to
    the spec), and the command runs from another folder, so both resolutions are exercised.
    """
    root = tmp_path_factory.mktemp("cli-e2e")
    write_yaml(root / "config.yaml", {"home": "home", "tags": {"team": "ml"}})
    spec_dir = root / "project"
    (spec_dir / "src").mkdir(parents=True)
    shutil.copy(TINY, spec_dir / "src" / TINY.name)
    write_yaml(spec_dir / "job.yaml", {
        "entry_point": TINY.name, "source_dir": "src", "instance_count": 1,
        "distribution": {"torch_distributed": {"enabled": True}, "processes_per_host": 2},
        "hyperparameters": {"tag": "from-spec"}, "checkpoint_s3_uri": str(root / "ckpt"),
        "dependencies": [str(GROUP_TEARDOWN)],
        "job_name": "cli-e2e",
    })
    (root / "elsewhere").mkdir()
    run = cli("run", "-f", "../project/job.yaml", "--hp", "tag=from-flag",
              "--processes-per-host", "1", env=cli_env(root / "config.yaml"),
              cwd=root / "elsewhere", timeout=JOB_TIMEOUT_S)
    yield Finished(root, run)
    kill_leftovers(root / "home")


@pytest.mark.slow
def test_run_waits_for_the_job_and_prints_its_logs(finished: Finished) -> None:
    run = finished.run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0] == "Started training job cli-e2e"
    assert "[algo-1 rank 0] rank 0 of 1 done, tag=from-flag" in lines  # --hp won over the spec
    model = f"{(finished.home / 'output').as_uri()}/cli-e2e/output/model.tar.gz"
    assert lines[-1] == f"cli-e2e: Completed; model: {model}"
    assert (finished.home / "jobs" / "cli-e2e").is_dir()  # home: relative to the config file
    assert_no_processes(finished.home)


def test_jobs_list_and_describe(finished: Finished) -> None:
    listed = cli("jobs", "list", env=finished.env)
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    name, status, created, attempts = line.split("\t")
    assert (name, status, attempts) == ("cli-e2e", "Completed", "1 attempt")
    assert created[:4].isdigit() and "T" in created

    described = cli("jobs", "describe", "cli-e2e", env=finished.env)
    assert described.returncode == 0, described.stderr
    job = json.loads(described.stdout)
    assert job["TrainingJobName"] == "cli-e2e"
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Completed", "Completed")
    hps = job["HyperParameters"]
    assert hps["tag"] == '"from-flag"'
    assert hps["ddpjob_processes_per_host"] == "1"  # --processes-per-host won over the spec
    assert hps["sagemaker_torch_distributed_enabled"] == "true"
    assert job["CheckpointConfig"]["S3Uri"] == finished.checkpoints.as_uri()
    assert job["ResourceConfig"]["InstanceCount"] == 1


def test_logs_prefix_every_line_with_its_host(finished: Finished) -> None:
    for extra in ([], ["--follow"]):  # following a finished job returns at once
        logs = cli("logs", "cli-e2e", *extra, env=finished.env)
        assert logs.returncode == 0, logs.stderr
        lines = logs.stdout.splitlines()
        assert lines and all(line.startswith(("[algo-1] ", "[algo-1 rank 0] ")) for line in lines)
        assert "[algo-1 rank 0] rank 0 of 1 done, tag=from-flag" in lines  # the worker's line


def test_logs_into_a_closed_pipe_end_quietly(finished: Finished) -> None:
    """`ddpjob logs NAME | head`: once the reader is gone, no message, and 141 as git (128 +
    SIGPIPE); the pipe is closed before the command starts, so its first line meets it."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as closed:
        logs = subprocess.run([sys.executable, "-m", "ddpjob.cli", "logs", "cli-e2e"],
                              stdout=closed, stderr=subprocess.PIPE, text=True,
                              env=finished.env, timeout=CLI_TIMEOUT_S)
    assert (logs.returncode, logs.stderr) == (141, "")


@pytest.mark.slow
def test_download_model_and_checkpoint(finished: Finished, tmp_path: Path) -> None:
    got = cli("download", "cli-e2e", str(tmp_path / "model"), env=finished.env)
    assert got.returncode == 0, got.stderr
    archive = tmp_path / "model" / "model.tar.gz"
    assert got.stdout.strip() == str(archive)
    with tarfile.open(archive) as tar:
        assert tar.extractfile("model.txt").read() == b"tag=from-flag\n"

    got = cli("download", "cli-e2e", "--checkpoint", str(tmp_path / "ckpt"), env=finished.env)
    assert got.returncode == 0, got.stderr
    step = tmp_path / "ckpt" / "step-000000007"
    assert got.stdout.strip() == str(step)
    assert json.loads((step / "manifest.json").read_text())["step"] == 7
    assert (step / "state.pt").stat().st_size > 0

    missing = cli("download", "cli-e2e", "--checkpoint", "--step", "3", str(tmp_path / "x"),
                  env=finished.env)
    assert missing.returncode == 2
    line = one_line(missing.stderr)
    assert "no complete checkpoint of step 3" in line and "complete steps: 7" in line
    assert not (tmp_path / "x" / "step-000000003").exists()


@pytest.mark.slow
def test_stop_and_unknown_job_are_service_errors(finished: Finished) -> None:
    stop = cli("stop", "cli-e2e", env=finished.env)
    assert stop.returncode == 3
    assert "already ended (Completed)" in one_line(stop.stderr)
    for command in (["jobs", "describe"], ["logs"], ["stop"], ["download"]):
        args = [*command, "no-such-job"] + (["somewhere"] if command == ["download"] else [])
        result = cli(*args, env=finished.env)
        assert result.returncode == 3, (command, result.stderr)
        line = one_line(result.stderr)
        assert "no training job named 'no-such-job'" in line, line
        assert str(finished.home) in line
        assert result.stdout == ""
    # A name that would be a path to the job (or elsewhere) is refused, and changes nothing.
    state = (finished.home / "jobs" / "cli-e2e" / "state.json").read_bytes()
    for command in (["jobs", "describe"], ["logs"], ["stop"]):
        for bad in ("./cli-e2e", "../jobs/cli-e2e"):
            result = cli(*command, bad, env=finished.env)
            assert result.returncode == 2, (command, bad, result.stderr)
            assert "NAME" in one_line(result.stderr) and "is not allowed" in result.stderr
    assert (finished.home / "jobs" / "cli-e2e" / "state.json").read_bytes() == state


@pytest.mark.slow
def test_a_failing_job_exits_1_with_one_line(home: Path) -> None:
    env = {**os.environ}
    run = cli("run", "--entry-point", str(JOBS / "fail_rank.py"), "--distribution", TORCHRUN,
              "--processes-per-host", "1", "--hp", "fail-rank=0", "--job-name", "cli-fails",
              env=env, timeout=JOB_TIMEOUT_S)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    line = one_line(run.stderr)
    assert line.startswith("ddpjob: Training job cli-fails ended Failed: AlgorithmError: host "
                           "algo-1, rank 0"), line
    assert line.endswith("ValueError: boom on rank 0")  # the cause, not the traceback too
    assert "[algo-1] " in run.stdout  # the logs were followed (the traceback is there)

    follow = cli("logs", "cli-fails", "--follow", env=env)
    assert follow.returncode == 1
    assert one_line(follow.stderr) == line
    job = json.loads(cli("jobs", "describe", "cli-fails", env=env).stdout)
    assert job["TrainingJobStatus"] == "Failed"
    assert_no_processes(home)


@pytest.mark.slow
def test_stop_a_running_job_from_another_process(home: Path, tmp_path: Path) -> None:
    """`ddpjob run` waits on a job that never ends; `ddpjob stop` from a second process ends
    it: stop exits 0, the waiting run exits 1 (Stopped), and no process of the job is left.
    The job is a plain script that imports no torch (the CLI and the stop are the subject)."""
    env = {**os.environ}
    out, err = tmp_path / "run.out", tmp_path / "run.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        runner = subprocess.Popen(
            [sys.executable, "-m", "ddpjob.cli", "run", "--entry-point",
             str(JOBS / "sleep_forever.py"), "--job-name", "cli-sleeper"],
            stdout=stdout, stderr=stderr, env=env)
    try:
        log = home / "jobs" / "cli-sleeper" / "logs" / "algo-1.log"
        wait_for(lambda: log.exists() and "rank 0 sleeping" in log.read_text(), JOB_TIMEOUT_S,
                 "the job to run")
        assert runner.poll() is None  # still waiting for the job

        stop = cli("stop", "cli-sleeper", env=env)
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout == "cli-sleeper: stopping\n"
        assert runner.wait(timeout=JOB_TIMEOUT_S) == 1
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    line = one_line(err.read_text())
    assert line.startswith("ddpjob: Training job cli-sleeper ended Stopped"), line
    assert "[algo-1] rank 0 sleeping" in out.read_text()
    job = json.loads(cli("jobs", "describe", "cli-sleeper", env=env).stdout)
    assert (job["TrainingJobStatus"], job["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert_no_processes(home)


# ---------------------------------------------------------------------------- help and parsing

COMMANDS = [[], ["run"], ["jobs"], ["jobs", "list"], ["jobs", "describe"], ["logs"], ["stop"],
            ["download"], ["stacks"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "ddpjob")
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {' '.join(['ddpjob', *command])} ")


def test_console_script_help_and_usage_error(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "ddpjob"
    assert script.exists(), "the ddpjob console script is not installed in this environment"
    env = cli_env(tmp_path / "unused.yaml")
    helped = subprocess.run([str(script), "--help"], capture_output=True, text=True, env=env,
                            timeout=CLI_TIMEOUT_S)
    assert helped.returncode == 0 and "Exit codes" in helped.stdout
    bad = subprocess.run([str(script), "launch"], capture_output=True, text=True, env=env,
                         timeout=CLI_TIMEOUT_S)
    assert bad.returncode == 2
    assert "invalid choice: 'launch'" in one_line(bad.stderr)


def _dry_run(capsys: pytest.CaptureFixture, *args: str) -> dict:
    assert main(["run", "--dry-run", *args]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.err == ""
    return json.loads(captured.out)


def test_hyperparameter_values_keep_their_type(home: Path, capsys: pytest.CaptureFixture) -> None:
    request = _dry_run(capsys, "--entry-point", str(NOOP), "--hp", "lr=1e-3", "--hp",
                       "epochs=3", "--hp", "name=resnet", "--hp", "flag=true", "--hp",
                       "day=2024-01-01", "--hp", "odd=[1,2", "--hp", "layers=[64, 32]",
                       "--hp", "empty=")
    hps = request["HyperParameters"]
    assert {k: hps[k] for k in ("lr", "epochs", "name", "flag", "day", "odd", "layers",
                                "empty")} == {
        "lr": "0.001", "epochs": "3", "name": '"resnet"', "flag": "true",
        "day": '"2024-01-01"', "odd": '"[1,2"', "layers": "[64, 32]", "empty": '""'}
    assert_nothing_local(home)


def test_spec_inputs_merge_with_input_flags(home: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    data = {name: tmp_path / name for name in ("a", "b", "c")}
    for path in data.values():
        path.mkdir()
    spec = write_yaml(tmp_path / "job.yaml", {
        "entry_point": str(NOOP), "inputs": {"train": str(data["a"]), "test": str(data["b"])},
        "job_name": "from-spec"})
    request = _dry_run(capsys, "-f", str(spec), "--input", f"test={data['c']}")
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
                for c in request["InputDataConfig"]}
    assert channels == {"train": data["a"].as_uri(), "test": data["c"].as_uri()}
    assert request["TrainingJobName"] == "from-spec"
    assert_nothing_local(home)


def test_spec_locations_are_relative_to_the_spec(tmp_path: Path, home: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    """As the README promises: inputs, checkpoint_s3_uri and output_path given as relative paths
    in a spec are the spec's, not the working folder's; URIs stay as they are."""
    project = tmp_path / "project"
    for folder in ("data/train", "data/test"):
        (project / folder).mkdir(parents=True)
    spec = write_yaml(project / "job.yaml", {
        "entry_point": str(NOOP), "inputs": {"train": "data/train", "test": "./data/test",
                                             "extra": "s3://bucket/extra/"},
        "checkpoint_s3_uri": "ckpt", "output_path": "out"})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    request = _dry_run(capsys, "-f", str(spec))
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"]
                for c in request["InputDataConfig"]}
    assert channels == {"train": (project / "data/train").as_uri(),
                        "test": (project / "data/test").as_uri(), "extra": "s3://bucket/extra/"}
    assert request["CheckpointConfig"]["S3Uri"] == (project / "ckpt").as_uri()
    assert request["OutputDataConfig"]["S3OutputPath"] == (project / "out").as_uri()
    one = write_yaml(project / "one.yaml", {"entry_point": str(NOOP), "inputs": "data/train"})
    request = _dry_run(capsys, "-f", str(one))
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == (
        project / "data/train").as_uri()


def test_spec_takes_the_estimators_table_arguments(home: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    spec = write_yaml(tmp_path / "job.yaml", {
        "entry_point": str(NOOP), "job_name": "table-spec",
        "metric_definitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        "disable_output_compression": True, "checkpoint_local_path": "/opt/ml/ckpt",
        "checkpoint_s3_uri": str(tmp_path / "ckpt"),
        "distribution": {"torch_distributed": {"enabled": True}, "max_restarts": 2}})
    request = _dry_run(capsys, "-f", str(spec))
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == [
        {"Name": "loss", "Regex": "loss=([0-9.]+)"}]
    assert request["OutputDataConfig"]["CompressionType"] == "NONE"
    assert request["CheckpointConfig"]["LocalPath"] == "/opt/ml/ckpt"
    assert request["HyperParameters"]["ddpjob_max_restarts"] == "2"
    assert_nothing_local(home)


def test_spec_code_paths_with_git_config_stay_inside_the_repository(tmp_path: Path) -> None:
    from ddpjob.config import load_spec

    spec = write_yaml(tmp_path / "job.yaml", {
        "entry_point": "train.py", "source_dir": "src",
        "git_config": {"repo": "https://github.com/aws/amazon-sagemaker-examples.git"}})
    assert load_spec(spec)["source_dir"] == "src"
    assert load_spec(write_yaml(tmp_path / "j2.yaml", {"entry_point": "train.py",
                                                        "source_dir": "src"}))[
        "source_dir"] == str(tmp_path / "src")


@pytest.mark.parametrize(("flag", "instance_type", "config", "expected"), [
    (None, None, Config(), ("local", "local")),
    ("sagemaker", None, Config(instance_type="ml.g5.xlarge"), ("sagemaker", "ml.g5.xlarge")),
    ("local", None, Config(backend="sagemaker", instance_type="ml.g5.xlarge"),
     ("local", "local")),
    (None, None, Config(backend="sagemaker", instance_type="ml.m5.large"),
     ("sagemaker", "ml.m5.large")),
    (None, None, Config(instance_type="ml.m5.large"), ("local", "local")),
    (None, "ml.p4d.24xlarge", Config(), ("sagemaker", "ml.p4d.24xlarge")),
    (None, "local_gpu", Config(backend="sagemaker"), ("local", "local_gpu")),
    ("sagemaker", "ml.g5.xlarge", Config(), ("sagemaker", "ml.g5.xlarge")),
])
def test_backend_and_instance_type(flag: str | None, instance_type: str | None, config: Config,
                                   expected: tuple[str, str]) -> None:
    assert resolve_backend(flag, instance_type, config) == expected


@pytest.mark.parametrize(("flag", "instance_type", "config", "match"), [
    ("sagemaker", None, Config(), "an instance type is required for SageMaker jobs"),
    (None, None, Config(backend="sagemaker", instance_type="local"),
     "an instance type is required for SageMaker jobs"),
    ("sagemaker", "local", Config(), "--backend sagemaker cannot run instance type 'local'"),
    ("local", "ml.g5.xlarge", Config(), "--backend local cannot run instance type"),
])
def test_backend_conflicts(flag: str | None, instance_type: str | None, config: Config,
                           match: str) -> None:
    with pytest.raises(UserInputError, match=match):
        resolve_backend(flag, instance_type, config)


def test_config_tags_merge_under_the_spec_tags() -> None:
    config = Config(tags={"team": "ml", "env": "dev"}, role=ROLE)
    assert merge_defaults({"tags": {"env": "prod"}}, config)["tags"] == {
        "team": "ml", "env": "prod"}
    assert merge_defaults({"tags": [{"Key": "env", "Value": "prod"}]}, config)["tags"] == [
        {"Key": "team", "Value": "ml"}, {"Key": "env", "Value": "prod"}]
    assert merge_defaults({}, config) == {"tags": {"team": "ml", "env": "dev"}, "role": ROLE}
    assert merge_defaults({"role": "other"}, config)["role"] == "other"


def test_config_file_forms(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "conf" / "config.yaml", {
        "home": "state", "tags": [{"Key": "team", "Value": "ml"}], "region": "eu-west-1",
        "default_bucket": "my.bucket-1", "role": ROLE, "backend": "sagemaker",
        "instance_type": "ml.g5.xlarge"})
    config = load_config(path)
    assert config.home == str(tmp_path / "conf" / "state")
    assert config.tags == {"team": "ml"}
    assert (config.backend, config.region, config.default_bucket, config.role,
            config.instance_type) == ("sagemaker", "eu-west-1", "my.bucket-1", ROLE,
                                      "ml.g5.xlarge")
    assert load_config(write_yaml(tmp_path / "empty.yaml", "")) == Config(
        path=tmp_path / "empty.yaml")


# ---------------------------------------------------------------------------- bad input, local

#: A "billion laughs": nine levels, each aliasing the previous one nine times (9**9 values).
LAUGHS = "[&l0 [" + ", ".join(["lol"] * 9) + "], " + ", ".join(
    f"&l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]" for level in range(1, 9)) + "]"

# (id, {file name: content} written in tmp_path, argv ({tmp} -> tmp_path), expected fragments)
BAD_INPUT: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    # flags
    ("instance-count-zero", {}, ["run", "--entry-point", str(NOOP), "--instance-count", "0"],
     ["argument --instance-count", "integer >= 1", "'0'"]),
    ("distribution-not-json", {}, ["run", "--entry-point", str(NOOP), "--distribution", "{x"],
     ["argument --distribution", "not valid JSON"]),
    ("distribution-not-object", {}, ["run", "--entry-point", str(NOOP), "--distribution", "[]"],
     ["argument --distribution", "must be a JSON object"]),
    ("input-without-channel", {}, ["run", "--entry-point", str(NOOP), "--input", "data"],
     ["argument --input", "expected KEY=VALUE", "'data'"]),
    ("unknown-backend", {}, ["jobs", "list", "--backend", "k8s"],
     ["argument --backend", "invalid choice: 'k8s'", "local", "sagemaker"]),
    ("list-max-too-big", {}, ["jobs", "list", "--max", "101"],
     ["argument --max", "between 1 and 100"]),
    ("step-negative", {}, ["download", "some-job", "{tmp}/d", "--checkpoint", "--step", "-1"],
     ["argument --step", "integer >= 0"]),
    ("step-without-checkpoint", {}, ["download", "some-job", "{tmp}/d", "--step", "3"],
     ["--step needs --checkpoint"]),
    ("bad-job-name-argument", {}, ["jobs", "describe", "bad_name"],
     ["NAME 'bad_name' is not allowed", "letters, digits and hyphens"]),
    ("no-entry-point", {}, ["run", "--instance-count", "1"],
     ["an entry point is required", "--entry-point", "entry_point"]),
    ("backend-contradicts-type", {}, ["run", "--entry-point", str(NOOP), "--backend",
                                      "sagemaker", "--instance-type", "local"],
     ["--backend sagemaker cannot run instance type 'local'", "ml."]),
    ("unknown-instance-type", {}, ["run", "--entry-point", str(NOOP), "--instance-type", "gpu"],
     ["instance_type 'gpu' is not allowed", "'local'", "'ml.g5.12xlarge'"]),
    ("missing-entry-point-file", {}, ["run", "--entry-point", "{tmp}/missing.py"],
     ["entry_point", "missing.py", "no such file"]),
    ("reserved-hyperparameter", {}, ["run", "--entry-point", str(NOOP), "--hp",
                                     "sagemaker_program=x.py"],
     ["'sagemaker_program' is reserved"]),
    ("bad-job-name-flag", {}, ["run", "--entry-point", str(NOOP), "--job-name", "my_job"],
     ["job_name 'my_job' is not allowed", "letters, digits and hyphens"]),
    ("checkpoint-uri-scheme", {}, ["run", "--entry-point", str(NOOP), "--checkpoint-uri",
                                   "ftp://host/ckpt"],
     ["checkpoint_s3_uri 'ftp://host/ckpt'", "unsupported scheme", "s3://"]),
    ("input-missing-path", {}, ["run", "--entry-point", str(NOOP), "--input",
                                "train={tmp}/nothing"],
     ["inputs['train']", "no such file or folder"]),
    # job spec
    ("spec-unknown-key", {"job.yaml": {"entry_point": str(NOOP), "epochs": 3}},
     ["run", "-f", "{tmp}/job.yaml"], ["job spec", "unknown key 'epochs'", "allowed:",
                                       "hyperparameters"]),
    ("spec-typo-key", {"job.yaml": {"entry_point": str(NOOP), "instance_cont": 2}},
     ["run", "-f", "{tmp}/job.yaml"], ["job spec", "unknown key 'instance_cont' (did you mean "
                                       "'instance_count'?)"]),
    ("spec-not-mapping", {"job.yaml": "- entry_point\n"}, ["run", "-f", "{tmp}/job.yaml"],
     ["job spec", "must be a mapping of keys to values"]),
    ("spec-invalid-yaml", {"job.yaml": "entry_point: a.py\n  bad: [\n"},
     ["run", "-f", "{tmp}/job.yaml"], ["job spec", "not valid YAML at line"]),
    ("spec-missing-file", {}, ["run", "-f", "{tmp}/nope.yaml"],
     ["job spec", "nope.yaml", "cannot read it"]),
    ("spec-hyperparameters-list", {"job.yaml": {"entry_point": str(NOOP),
                                                "hyperparameters": ["lr", 1]}},
     ["run", "-f", "{tmp}/job.yaml", "--hp", "epochs=2"],
     ["job spec", "hyperparameters must be a mapping"]),
    ("spec-distribution-string", {"job.yaml": {"entry_point": str(NOOP),
                                               "distribution": "torchrun"}},
     ["run", "-f", "{tmp}/job.yaml", "--processes-per-host", "2"],
     ["job spec", "distribution must be a mapping"]),
    ("spec-instance-count-text", {"job.yaml": {"entry_point": str(NOOP),
                                               "instance_count": "two"}},
     ["run", "-f", "{tmp}/job.yaml"], ["instance_count must be an integer >= 1", "'two'"]),
    ("spec-distribution-unknown", {"job.yaml": {"entry_point": str(NOOP),
                                                "distribution": {"torchrun": {}}}},
     ["run", "-f", "{tmp}/job.yaml"], ["distribution", "unknown key 'torchrun'"]),
    ("spec-tags-entry", {"job.yaml": {"entry_point": str(NOOP), "tags": [{"Key": "a"}]}},
     ["run", "-f", "{tmp}/job.yaml"], ["tags", "{'Key': 'a'}", "'Value'"]),
    ("spec-billion-laughs", {"job.yaml": f"entry_point: {NOOP}\nhyperparameters:\n  x: {LAUGHS}\n"},
     ["run", "-f", "{tmp}/job.yaml"], ["job spec", "aliases (*name) expand to more than 100,000"]),
    # config file (named with --config; DDPJOB_CONFIG names a good one)
    ("config-billion-laughs", {"c.yaml": f"tags: {{t: {LAUGHS}}}\n"},
     ["jobs", "list", "--config", "{tmp}/c.yaml"], ["config file", "aliases (*name) expand"]),
    ("config-unknown-key", {"c.yaml": {"bucket": "b"}}, ["jobs", "list", "--config",
                                                          "{tmp}/c.yaml"],
     ["config file", "unknown key 'bucket' (did you mean 'default_bucket'?)"]),
    ("config-backend", {"c.yaml": {"backend": "k8s"}}, ["jobs", "list", "--config",
                                                         "{tmp}/c.yaml"],
     ["config file", "backend must be 'local' or 'sagemaker', not 'k8s'"]),
    ("config-instance-type", {"c.yaml": {"instance_type": "gpu"}},
     ["run", "--entry-point", str(NOOP), "--config", "{tmp}/c.yaml"],
     ["config file", "instance_type 'gpu' is not allowed", "'ml.g5.12xlarge'"]),
    ("config-bucket", {"c.yaml": {"default_bucket": "My_Bucket"}},
     ["jobs", "list", "--config", "{tmp}/c.yaml"],
     ["config file", "default_bucket 'My_Bucket' is not an S3 bucket name", "lowercase"]),
    ("config-tag-number", {"c.yaml": {"tags": {"cost": 5}}},
     ["run", "--entry-point", str(NOOP), "--config", "{tmp}/c.yaml"],
     ["config file", "tags must map non-empty strings to strings"]),
    ("config-role", {"c.yaml": {"role": "arn:aws:iam::12:role"}},
     ["jobs", "list", "--config", "{tmp}/c.yaml"],
     ["config file", "role 'arn:aws:iam::12:role' is not an IAM role ARN", "arn:aws:iam::"]),
    ("config-region", {"c.yaml": {"region": "mars"}}, ["jobs", "list", "--config",
                                                        "{tmp}/c.yaml"],
     ["config file", "region 'mars' is not an AWS region name", "'us-east-1'"]),
    ("config-home-type", {"c.yaml": {"home": 5}}, ["jobs", "list", "--config", "{tmp}/c.yaml"],
     ["config file", "home must be a folder path, got 5"]),
    ("config-missing-file", {}, ["jobs", "list", "--config", "{tmp}/none.yaml"],
     ["config file", "none.yaml", "cannot read it"]),
]


@pytest.mark.parametrize(("files", "argv", "fragments"), [case[1:] for case in BAD_INPUT],
                         ids=[case[0] for case in BAD_INPUT])
def test_bad_input_is_one_clear_line_and_nothing_is_submitted(
    files: dict[str, Any], argv: list[str], fragments: list[str], home: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    for name, content in files.items():
        write_yaml(tmp_path / name, content)
    code = main([arg.replace("{tmp}", str(tmp_path)) for arg in argv])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    line = one_line(captured.err)
    assert line.startswith("ddpjob") and ": error: " in line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert captured.out == ""
    assert_nothing_local(home)


def test_config_file_in_the_environment_is_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("DDPJOB_CONFIG", str(write_yaml(tmp_path / "c.yaml", "[1, 2]\n")))
    assert main(["jobs", "list"]) == 2
    assert "must be a mapping of keys to values" in one_line(capsys.readouterr().err)


# ---------------------------------------------------------------------------- SageMaker (moto)


def _moto_jobs() -> list[str]:
    import boto3

    pages = boto3.client("sagemaker").get_paginator("list_training_jobs").paginate()
    return [job["TrainingJobName"] for page in pages for job in page["TrainingJobSummaries"]]


def _buckets() -> set[str]:
    import boto3

    return {bucket["Name"] for bucket in boto3.client("s3").list_buckets()["Buckets"]}


def _keys(bucket: str) -> list[str]:
    import boto3

    response = boto3.client("s3").list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in response.get("Contents", []))


@pytest.fixture
def sagemaker_project(tmp_path: Path, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A source folder, a spec for a SageMaker job and a config file (backend sagemaker, role,
    bucket, instance type, tags) in DDPJOB_CONFIG; the AWS environment points at moto."""
    monkeypatch.delenv(DEBUG, raising=False)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('training')\n")
    config = write_yaml(tmp_path / "config.yaml", {
        "backend": "sagemaker", "role": ROLE, "default_bucket": s3_bucket,
        "instance_type": "ml.g5.xlarge", "tags": {"team": "ml", "env": "dev"},
        "home": str(tmp_path / "home")})
    monkeypatch.setenv("DDPJOB_CONFIG", str(config))
    write_yaml(tmp_path / "job.yaml", {"entry_point": "train.py", "source_dir": "src",
                                       "image_uri": IMAGE, "instance_count": 2,
                                       "distribution": {"torch_distributed": {"enabled": True}}})
    return tmp_path


def _validate_create_training_job(request: dict) -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("sagemaker")
    report = ParamValidator().validate(request, model.operation_model("CreateTrainingJob")
                                       .input_shape)
    assert not report.has_errors(), report.generate_report()


@pytest.mark.parametrize(("spec_tags", "expected"), [
    ([{"Key": "env", "Value": "prod"}], {"team": "ml", "env": "prod"}),
    ({"env": "prod", "owner": "me"}, {"team": "ml", "env": "prod", "owner": "me"}),
], ids=["spec-tags-list", "spec-tags-dict"])
def test_dry_run_request_has_the_config_defaults(sagemaker_project: Path, s3_bucket: str,
                                                 spec_tags: Any, expected: dict) -> None:
    spec = yaml.safe_load((sagemaker_project / "job.yaml").read_text())
    write_yaml(sagemaker_project / "job.yaml", {**spec, "tags": spec_tags})
    buckets = _buckets()
    run = cli("run", "-f", str(sagemaker_project / "job.yaml"), "--dry-run", "--job-name",
              "cli-dry-run", "--hp", "epochs=2", env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    request = json.loads(run.stdout)
    _validate_create_training_job(request)
    assert request["TrainingJobName"] == "cli-dry-run"
    assert request["RoleArn"] == ROLE
    assert request["OutputDataConfig"]["S3OutputPath"] == f"s3://{s3_bucket}/"
    assert json.loads(request["HyperParameters"]["sagemaker_submit_directory"]) == (
        f"s3://{s3_bucket}/cli-dry-run/source/sourcedir.tar.gz")
    assert request["HyperParameters"]["epochs"] == "2"
    assert request["ResourceConfig"]["InstanceType"] == "ml.g5.xlarge"
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert request["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    tags = {tag["Key"]: tag["Value"] for tag in request["Tags"]}
    assert tags == expected and len(request["Tags"]) == len(expected)  # the spec's env won
    # A dry run sends nothing: no job, no upload, no bucket.
    assert "cli-dry-run" not in _moto_jobs()
    assert _keys(s3_bucket) == []
    assert _buckets() == buckets


@pytest.mark.slow
def test_submit_describe_list_and_stop_on_sagemaker(sagemaker_project: Path,
                                                    s3_bucket: str) -> None:
    env = dict(os.environ)
    name = f"cli-sm-{uuid.uuid4().hex[:8]}"
    run = cli("run", "-f", str(sagemaker_project / "job.yaml"), "--no-wait", "--job-name", name,
              env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"{name}\n"  # only the name: JOB=$(ddpjob run --no-wait ...)
    assert f"Started training job {name}" in run.stderr
    assert _keys(s3_bucket) == [f"{name}/source/sourcedir.tar.gz"]

    described = cli("jobs", "describe", name, env=env)
    assert described.returncode == 0, described.stderr
    job = json.loads(described.stdout)
    assert (job["RoleArn"], job["ResourceConfig"]["InstanceType"]) == (ROLE, "ml.g5.xlarge")
    listed = cli("jobs", "list", "--max", "100", env=env)
    assert listed.returncode == 0, listed.stderr
    assert name in [line.split("\t")[0] for line in listed.stdout.splitlines()]
    stop = cli("stop", name, env=env)  # moto's jobs are Completed at once
    assert stop.returncode == 3
    assert f"training job {name} has already ended (Completed)" in one_line(stop.stderr)
    missing = cli("jobs", "describe", "cli-sm-missing", env=env)
    assert missing.returncode == 3
    assert "no training job named 'cli-sm-missing' in SageMaker in us-east-1" in one_line(
        missing.stderr)


SAGEMAKER_BAD_INPUT: list[tuple[str, dict[str, Any], dict[str, Any], list[str], list[str]]] = [
    # (id, config file changes, spec changes (None: remove the key), flags, expected fragments)
    ("no-role", {"role": None}, {}, [],
     ["a role is required for SageMaker jobs", "--role", "config file"]),
    ("no-role-no-bucket", {"role": None, "default_bucket": None}, {}, [],
     ["a role is required for SageMaker jobs"]),
    ("bad-role", {}, {}, ["--role", "admin role"],
     ["role 'admin role' is neither an IAM role ARN nor a role name"]),
    ("unknown-framework-version", {}, {"image_uri": None, "framework_version": "0.1"}, [],
     ["framework_version '0.1' has no SageMaker training container; available:"]),
    ("local-output-path", {}, {}, ["--output-path", "/tmp/out"],
     ["output_path '/tmp/out'", "SageMaker jobs need an s3:// URI"]),
    ("no-instance-type", {"instance_type": None}, {}, [],
     ["an instance type is required for SageMaker jobs", "--instance-type"]),
    ("local-type-on-sagemaker", {}, {"instance_type": "local"}, ["--backend", "sagemaker"],
     ["--backend sagemaker cannot run instance type 'local'"]),
]


def _change(path: Path, changes: dict[str, Any]) -> None:
    data = {**yaml.safe_load(path.read_text()), **changes}
    write_yaml(path, {key: value for key, value in data.items() if value is not None})


@pytest.mark.parametrize(("config_changes", "spec_changes", "flags", "fragments"),
                         [case[1:] for case in SAGEMAKER_BAD_INPUT],
                         ids=[case[0] for case in SAGEMAKER_BAD_INPUT])
def test_sagemaker_bad_input_creates_nothing(
    config_changes: dict[str, Any], spec_changes: dict[str, Any], flags: list[str],
    fragments: list[str], sagemaker_project: Path, s3_bucket: str,
    capsys: pytest.CaptureFixture,
) -> None:
    _change(sagemaker_project / "config.yaml", config_changes)
    _change(sagemaker_project / "job.yaml", spec_changes)
    buckets = _buckets()
    code = main(["run", "-f", str(sagemaker_project / "job.yaml"), "--job-name", "cli-sm-bad",
                 *flags])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    line = one_line(captured.err)
    assert line.startswith("ddpjob: error: ")
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert captured.out == ""
    assert "cli-sm-bad" not in _moto_jobs()
    assert _keys(s3_bucket) == []
    assert _buckets() == buckets  # not even the default bucket was created
    assert_nothing_local(sagemaker_project / "home")
