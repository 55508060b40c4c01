"""Bad input: one clear single-line error each, and nothing packed, uploaded or submitted."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import boto3
import pytest
from ddpjob import PyTorch
from ddpjob.errors import UserInputError

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda"
TORCHRUN = {"torch_distributed": {"enabled": True}}

# (id, estimator arguments to change, fit() arguments or None (error at construction), match)
LOCAL_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, str]] = [
    ("no-such-entry-point", {"entry_point": "missing.py"}, None,
     r"entry_point 'missing.py': no such file in source_dir"),
    ("entry-point-outside", {"entry_point": "../train.py"}, None, r"relative to source_dir"),
    ("no-such-source-dir", {"source_dir": "/nonexistent/src"}, None, r"source_dir .*no such"),
    ("dependencies-string", {"dependencies": "lib"}, None, r"dependencies must be a list"),
    ("dependency-missing", {"dependencies": ["/nonexistent/lib"]}, None,
     r"dependencies: '/nonexistent/lib' is not an existing"),
    ("instance-count-zero", {"instance_count": 0}, None, r"instance_count must be an integer"),
    ("instance-count-bool", {"instance_count": True}, None, r"instance_count must be an integer"),
    ("max-run-huge", {"max_run": 10**400}, None,
     r"max_run must be an integer between 1 and 2147483647, got an integer of 401 digits"),
    ("max-wait-unprintable", {"use_spot_instances": True, "max_wait": 10**5000}, None,
     r"max_wait must be an integer between 1 and 2147483647, got an integer of 5001 digits"),
    ("instance-type-unknown", {"instance_type": "gpu"}, None, r"instance_type 'gpu' is not"),
    ("unsupported-official-arg", {"container_entry_point": ["python"]}, None,
     r"container_entry_point .* not supported by ddpjob"),
    ("typo-arg", {"hyperparameter": {"lr": 1}}, None,
     r"unexpected argument 'hyperparameter' \(did you mean 'hyperparameters'\?\)"),
    ("ppn-outside-distribution", {"processes_per_host": 2}, None,
     r"processes_per_host is not an estimator argument: it belongs in distribution: "
     r"distribution=\{\"processes_per_host\": N\}"),
    ("instance-count-huge-local", {"instance_count": 10_000}, {},
     r"^instance_count: .*InstanceCount 10000: this machine runs at most"),
    ("v1-and-v2-name", {"train_volume_size": 5, "volume_size": 5}, None,
     r"give volume_size or its old name train_volume_size"),
    ("volume-size-zero", {"volume_size": 0}, None, r"volume_size must be an integer between 1"),
    ("keep-alive-long", {"keep_alive_period_in_seconds": 7200}, None,
     r"keep_alive_period_in_seconds must be an integer between 0 and 3600"),
    ("subnets-string", {"subnets": "subnet-1"}, None, r"subnets must be a list of strings"),
    ("metric-regex", {"metric_definitions": [{"Name": "loss", "Regex": "loss=("}]}, None,
     r"metric_definitions: 'loss' has an invalid regex"),
    ("input-mode", {"input_mode": "Stream"}, None, r"input_mode must be 'File', 'Pipe'"),
    ("input-mode-pipe-local", {"input_mode": "Pipe"}, {},
     r"input_mode 'Pipe' cannot run locally"),
    ("debugger-hook-true", {"debugger_hook_config": True}, None,
     r"debugger_hook_config must be the official SDK's object"),
    ("disable-profiler-string", {"disable_profiler": "yes"}, None,
     r"disable_profiler must be True, False or None"),
    ("instance-groups-local", {"instance_groups": [{"InstanceGroupName": "a",
                                                    "InstanceType": "local",
                                                    "InstanceCount": 1}]}, {},
     r"instance_groups cannot run locally"),
    ("git-config-no-repo", {"git_config": {"branch": "main"}}, None,
     r"git_config must be a dict with at least 'repo'"),
    ("environment-reserved-sm", {"environment": {"SM_MODEL_DIR": "/tmp/m"}}, None,
     r"environment: 'SM_MODEL_DIR' is reserved"),
    ("environment-reserved-ddpjob", {"environment": {"DDPJOB_HOST": "x"}}, None,
     r"environment: 'DDPJOB_HOST' is reserved"),
    ("checkpoint-local-relative", {"checkpoint_local_path": "ckpt"}, None,
     r"checkpoint_local_path 'ckpt' refused: an absolute path without '..' is required"),
    ("checkpoint-local-dotdot", {"checkpoint_local_path": "/opt/ml/../.."}, None,
     r"checkpoint_local_path '/opt/ml/../..' refused: an absolute path without '..'"),
    ("checkpoint-local-outside", {"checkpoint_local_path": "/home/me/ckpt"}, None,
     r"checkpoint_local_path '/home/me/ckpt' refused: it must be a folder below /opt/ml"),
    ("tensorboard-local-dotdot", {"tensorboard_output_config": {
        "S3OutputPath": "s3://b/tb", "LocalPath": "/opt/ml/output/../../.."}}, None,
     r"tensorboard_output_config LocalPath '/opt/ml/output/../../..' refused"),
    ("dist-ppn-huge", {"distribution": {"processes_per_host": 10_000}}, None,
     r"processes_per_host must be an integer between 1 and 64"),
    ("dist-modelparallel-local", {"distribution": {"smdistributed": {"modelparallel": {
        "enabled": True, "parameters": {"partitions": 1}}}, "mpi": {"enabled": True}},
        "instance_count": 1}, {}, r"modelparallel needs SageMaker's model-parallel container"),
    ("training-input-pipe-local", {}, {"inputs": {"train": "PIPE"}},
     r"inputs\['train'\]: InputMode='Pipe' cannot run locally"),
    ("training-input-gzip-local", {}, {"inputs": {"train": "GZIP"}},
     r"inputs\['train'\]: CompressionType='Gzip' cannot run locally"),
    ("training-input-manifest-local", {}, {"inputs": {"train": "MANIFEST"}},
     r"inputs\['train'\]: S3DataType='ManifestFile' cannot run locally"),
    ("training-input-bad-distribution", {}, {"inputs": {"train": "SHARDED_TYPO"}},
     r"TrainingInput distribution must be one of FullyReplicated, ShardedByS3Key"),
    ("fit-logs", {}, {"logs": "Some"}, r"logs must be 'All', 'None', True or False"),
    ("dist-not-dict", {"distribution": "torch_distributed"}, None, r"distribution: must be a dict"),
    ("dist-unknown-key", {"distribution": {"torchrun": {"enabled": True}}}, None,
     r"distribution: unknown key 'torchrun'"),
    ("dist-two-strategies", {"distribution": {**TORCHRUN, "mpi": {"enabled": True}}}, None,
     r"give one strategy"),
    ("dist-enabled-not-bool", {"distribution": {"pytorchddp": {"enabled": "yes"}}}, None,
     r"pytorchddp needs 'enabled': True or False, got 'yes'"),
    ("dist-disabled-with-keys",
     {"distribution": {"mpi": {"enabled": False, "processes_per_host": 2}}}, None,
     r"mpi is disabled .* sets processes_per_host"),
    ("dist-mpi-ppn-zero", {"distribution": {"mpi": {"enabled": True, "processes_per_host": 0}}},
     None, r"processes_per_host'\] must be an integer between 1 and 64"),
    ("dist-mpi-multi-host", {"distribution": {"mpi": {"enabled": True}}, "instance_count": 2},
     None, r"distribution 'mpi' runs on one host \(instance_count=1\) unless"),
    ("dist-ppn-float", {"distribution": {"processes_per_host": 1.5}}, None,
     r"processes_per_host must be an integer between 1 and 64"),
    ("dist-restarts-negative", {"distribution": {**TORCHRUN, "max_restarts": -1}}, None,
     r"distribution: max_restarts must be an integer from 0 to 100, got -1"),
    ("dist-restarts-too-many", {"distribution": {**TORCHRUN, "max_restarts": 101}}, None,
     r"max_restarts must be an integer from 0 to 100, got 101"),
    ("dist-restarts-string", {"distribution": {**TORCHRUN, "max_restarts": "2"}}, None,
     r"max_restarts must be an integer from 0 to 100, got '2'"),
    ("dist-restarts-bool", {"distribution": {**TORCHRUN, "max_restarts": True}}, None,
     r"max_restarts must be an integer from 0 to 100, got True"),
    ("dist-restarts-no-torchrun", {"distribution": {"max_restarts": 1}}, None,
     r"max_restarts needs torchrun"),
    ("dist-strategy-key-typo", {"distribution": {"torch_distributed": {"enable": True}}}, None,
     r"torch_distributed has unknown key 'enable'"),
    ("dist-modelparallel", {"distribution": {"smdistributed": {"modelparallel": {}}}}, None,
     r"smdistributed.modelparallel needs 'enabled': True or False"),
    ("dist-parameter-server", {"distribution": {"parameter_server": {"enabled": True}}}, None,
     r"'parameter_server' is not supported"),
    ("hp-not-dict", {"hyperparameters": ["lr", 1]}, None, r"hyperparameters must be a dict"),
    ("hp-reserved-sagemaker", {"hyperparameters": {"sagemaker_program": "x.py"}}, None,
     r"'sagemaker_program' is reserved"),
    ("hp-reserved-ddpjob", {"hyperparameters": {"ddpjob_processes_per_host": 2}}, None,
     r"'ddpjob_processes_per_host' is reserved"),
    ("hp-not-json", {"hyperparameters": {"fn": object()}}, None,
     r"the value of 'fn' cannot be JSON-encoded"),
    ("hp-nan", {"hyperparameters": {"lr": float("nan")}}, None, r"cannot be JSON-encoded"),
    ("hp-value-too-long", {"hyperparameters": {"text": "x" * 2600}}, None,
     r"at most 2500"),
    ("hp-name-too-long", {"hyperparameters": {"n" * 300: 1}}, None, r"at most 256"),
    ("hp-name-equals", {"hyperparameters": {"a=b": 1}}, None, r"cannot contain '=' or NUL"),
    ("hp-name-nul", {"hyperparameters": {"a\x00b": 1}}, None, r"cannot contain '=' or NUL"),
    ("hp-too-many", {"hyperparameters": {f"h{i}": i for i in range(99)}}, {},
     r"SageMaker allows at most 100, so give at most"),
    ("base-job-name", {"base_job_name": "my_job"}, None, r"base_job_name 'my_job' is not"),
    ("environment-name", {"environment": {"1BAD": "x"}}, None, r"'1BAD' is not a variable name"),
    ("environment-value", {"environment": {"A": 1}}, None, r"environment\['A'\] must be a string"),
    ("max-run-zero", {"max_run": 0}, None, r"max_run must be an integer"),
    ("max-wait-no-spot", {"max_wait": 7200}, None, r"max_wait is only allowed"),
    ("max-wait-short", {"use_spot_instances": True, "max_wait": 10, "max_run": 100}, None,
     r"max_wait \(10\) must be >= max_run"),
    ("retry-too-many", {"max_retry_attempts": 31}, None, r"between 1 and 30"),
    ("tags-bad", {"tags": [{"Key": "a"}]}, None, r"tags: .* must be"),
    ("checkpoint-uri-scheme", {"checkpoint_s3_uri": "gs://bucket/ckpt"}, None,
     r"checkpoint_s3_uri 'gs://bucket/ckpt': unsupported scheme"),
    ("checkpoint-uri-malformed", {"checkpoint_s3_uri": "s3:/bad"}, None,
     r"checkpoint_s3_uri 's3:/bad': unsupported scheme 's3' or malformed URI"),
    ("checkpoint-uri-relative-file", {"checkpoint_s3_uri": "file:ckpt"}, None,
     r"checkpoint_s3_uri 'file:ckpt': unsupported scheme 'file' or malformed URI"),
    ("output-bad-bucket", {"output_path": "s3://B_ad/out"}, None, r"not an S3 bucket name"),
    ("session-wrong-type", {"session": "local"}, None, r"session must be a ddpjob Session"),
    ("inputs-wrong-type", {}, {"inputs": 42}, r"inputs must be a URI"),
    ("inputs-missing-path", {}, {"inputs": {"train": "/nonexistent/data"}},
     r"inputs\['train'\] '/nonexistent/data': no such file or folder"),
    ("inputs-bad-channel", {}, {"inputs": {"tr ain": "s3://bucket/x"}},
     r"channel name 'tr ain' is not allowed"),
    ("inputs-dot-channel", {}, {"inputs": {".": "s3://bucket/x"}},
     r"channel name '\.' is not allowed"),
    ("inputs-dotdot-channel", {}, {"inputs": {"..": "s3://bucket/x"}},
     r"channel name '\.\.' is not allowed"),
    ("inputs-bad-scheme", {}, {"inputs": "http://example.com/data"},
     r"inputs\['training'\] .* unsupported scheme"),
    ("job-name-underscore", {}, {"job_name": "my_job"}, r"job_name 'my_job' is not allowed"),
    ("job-name-too-long", {}, {"job_name": "j" * 64}, r"has 64 characters"),
]


def _local_kwargs(src: Path, session: Any) -> dict[str, Any]:
    return {"entry_point": "train.py", "source_dir": str(src), "instance_type": "local",
            "instance_count": 2, "distribution": TORCHRUN, "session": session}


def _with_training_inputs(fit_kwargs: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """Replace the TrainingInput markers of LOCAL_CASES by TrainingInputs of a local folder."""
    from ddpjob import TrainingInput

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    markers = {"PIPE": {"input_mode": "Pipe"}, "GZIP": {"compression": "Gzip"},
               "MANIFEST": {"s3_data_type": "ManifestFile"},
               "SHARDED_TYPO": {"distribution": "Sharded"}}
    channels = fit_kwargs.get("inputs")
    if not isinstance(channels, dict) or not any(v in markers for v in channels.values()):
        return fit_kwargs
    return {**fit_kwargs, "inputs": {name: TrainingInput(str(data), **markers[value])
                                     for name, value in channels.items()}}


def _assert_one_line_error(excinfo: pytest.ExceptionInfo, match: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert excinfo.type is UserInputError or issubclass(excinfo.type, UserInputError)


@pytest.mark.parametrize(("case", "changes", "fit_kwargs", "match"), LOCAL_CASES,
                         ids=[case[0] for case in LOCAL_CASES])
def test_local_bad_input(case: str, changes: dict, fit_kwargs: dict | None, match: str,
                         src: Path, local_session: Any, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {**_local_kwargs(src, local_session), **changes}
    with pytest.raises(UserInputError, match=match) as excinfo:
        estimator = PyTorch(**kwargs)
        estimator.fit(**_with_training_inputs(fit_kwargs or {}, tmp_path))
    _assert_one_line_error(excinfo, match)
    # nothing packed, stored or submitted: the LocalSession's home was never written
    assert not (tmp_path / "home").exists()
    assert not list(tmp_path.glob("**/sourcedir.tar.gz"))


def _fifo(src: Path) -> None:
    os.mkfifo(src / "pipe")


def _socket(src: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))  # the file stays after the socket is closed


@pytest.mark.parametrize(("make", "entry", "match"), [
    (lambda src: (src / "-evil.py").write_text(""), "-evil.py",
     r"entry_point '-evil.py': a name starting with '-' would be read as an option"),
    (_fifo, "train.py", r"src/pipe: a named pipe \(FIFO\), not a file or folder, cannot be"),
    (_socket, "train.py", r"src/sock: a socket, not a file or folder, cannot be packed"),
], ids=["entry-point-dash", "fifo", "socket"])
def test_source_dir_that_cannot_be_packed(make: Any, entry: str, match: str, src: Path,
                                         local_session: Any, tmp_path: Path) -> None:
    make(src)
    with pytest.raises(UserInputError, match=match) as excinfo:
        PyTorch(**{**_local_kwargs(src, local_session), "entry_point": entry}).fit()
    _assert_one_line_error(excinfo, match)
    assert local_session.list() == []  # no job; nothing packed or stored
    assert not list(tmp_path.glob("**/sourcedir.tar.gz"))


AWS_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None, str]] = [
    ("unknown-framework-version", {"image_uri": None, "framework_version": "0.9.9"}, {},
     r"framework_version '0.9.9' has no SageMaker training container; available: .*2\.8\.0"),
    ("processor-mismatch", {"image_uri": None, "instance_type": "ml.trn1.2xlarge"}, {},
     r"instance_type 'ml.trn1.2xlarge' needs a neuron image, but framework [\d.]+ has cpu/gpu "
     r"training images only"),
    ("py-version-mismatch", {"image_uri": None, "framework_version": "2.8.0",
                             "py_version": "py27"}, {},
     r"py_version \(framework 2.8.0\) 'py27' has no SageMaker training container; available: "
     r"py312"),
    ("region-without-image", {"image_uri": None, "session": "MARS"}, {},
     r"region 'mars-east-1' has no SageMaker training container"),
    ("no-role", {"role": None}, {}, r"role is required for SageMaker jobs"),
    ("no-role-default-bucket", {"role": None, "output_path": None}, {},
     r"role is required for SageMaker jobs"),
    ("bad-role-arn", {"role": "arn:aws:iam::12:role/x"}, {}, r"is not an IAM role ARN"),
    ("file-output-path", {"output_path": "file:///tmp/out"}, None,
     r"output_path 'file:///tmp/out': SageMaker jobs need an s3:// URI"),
    ("local-type-on-session", {"instance_type": "local"}, None,
     r"instance_type 'local' cannot run on a Session"),
    ("missing-output-bucket", {"output_path": "s3://no-such-bucket-xyz/out"}, {},
     r"s3://no-such-bucket-xyz/out failed: no such bucket"),
    ("hp-too-many", {"hyperparameters": {f"h{i}": i for i in range(96)}}, {},
     r"at most 100"),
    ("max-restarts-on-dlc", {"image_uri": None,
                             "distribution": {**TORCHRUN, "max_restarts": 2}}, {},
     r"distribution: max_restarts needs ddpjob's launcher .* SageMaker's PyTorch container"),
    ("runtime-name-taken-on-dlc", {"image_uri": None, "source_dir": "RUNTIME_CLASH"}, {},
     r"is named like ddpjob's runtime"),
]


@pytest.mark.parametrize(("case", "changes", "fit_kwargs", "match"), AWS_CASES,
                         ids=[case[0] for case in AWS_CASES])
def test_aws_bad_input(case: str, changes: dict, fit_kwargs: dict | None, match: str,
                       src: Path, aws_session: Any, s3_bucket: str, moto_probe: Any) -> None:
    from ddpjob.errors import DdpjobError

    kwargs = {"entry_point": "train.py", "source_dir": str(src), "instance_type": "ml.g5.xlarge",
              "instance_count": 2, "distribution": TORCHRUN, "session": aws_session,
              "role": ROLE, "image_uri": IMAGE, "output_path": f"s3://{s3_bucket}/out",
              **changes}
    if kwargs["source_dir"] == "RUNTIME_CLASH":  # the code has its own ddpjob_runtime folder
        (src / "ddpjob_runtime").mkdir()
        kwargs["source_dir"] = str(src)
    if kwargs["session"] == "MARS":
        from ddpjob.sagemaker.session import Session

        kwargs["session"] = Session(boto3.Session(region_name="mars-east-1"))
    buckets_before, jobs_before = moto_probe.buckets(), moto_probe.training_jobs()
    with pytest.raises(DdpjobError, match=match) as excinfo:
        estimator = PyTorch(**kwargs)
        estimator.fit(wait=False, **(fit_kwargs or {}))
    assert "\n" not in str(excinfo.value)
    assert moto_probe.s3_keys(s3_bucket) == []
    assert moto_probe.buckets() == buckets_before  # not even the default bucket
    assert moto_probe.training_jobs() == jobs_before


def test_bad_input_count() -> None:
    """The issue asks for at least 25 distinct bad-input cases."""
    assert len(LOCAL_CASES) + len(AWS_CASES) >= 25


@pytest.mark.parametrize(("name", "valid"), [
    ("b", False), ("My_Bucket", False), ("a..b", False), ("-bucket", False),
    ("192.168.5.4", False), ("my-bucket.v2", True), ("sagemaker-us-east-1-123456789012", True),
])
def test_one_bucket_naming_rule_everywhere(name: str, valid: bool, tmp_path: Path) -> None:
    """S3's naming rules, checked in one place: a `Session(default_bucket=...)`, an `s3://` URI
    (output_path, inputs, ...), `download_data(path, bucket)` and the config file agree."""
    from ddpjob.config import load_config
    from ddpjob.sagemaker.session import Session
    from ddpjob_runtime.shared import storage

    boto = boto3.Session(region_name="us-east-1", aws_access_key_id="fake",
                         aws_secret_access_key="fake")
    config = tmp_path / "config.yaml"
    config.write_text(f"default_bucket: '{name}'\n")
    checks = {
        "Session": lambda: Session(boto, default_bucket=name),
        "URI": lambda: storage.parse(f"s3://{name}/out", argument="output_path"),
        "download_data": lambda: Session(boto).download_data(str(tmp_path / "d"), name, "k"),
        "config": lambda: load_config(config),
    }
    for where, check in checks.items():
        if valid and where != "download_data":  # a valid name would go on to S3
            check()
        elif not valid:
            with pytest.raises(UserInputError, match="is not an S3 bucket name") as raised:
                check()
            assert "not an IP address" in str(raised.value), where
