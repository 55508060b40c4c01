"""`LocalSession().official_session()` with the official SDK v2: its own `sagemaker.Session`,
every AWS request of a training job answered on this machine.

The official SDK is the real one (2.257); data on S3 is a moto server over HTTP. Every HTTP
request botocore sends from this process is checked: only moto may be reached (and nothing at
all without an AWS account).
"""

from __future__ import annotations

import copy
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from ddpjob.errors import UserInputError
from ddpjob.local.aws import log_streams
from ddpjob.local.session import LOCAL_ROLE, LocalSession

from tests.interop.conftest import IMAGE_URI, TRAIN_SCRIPT, OffMachineRequest
from tests.local.conftest import assert_no_processes, log_text, wait_for, wait_until_ended
from tests.local.test_admission import assert_admitted_once

pytestmark = pytest.mark.slow

BUCKET = "sagemaker-local"


def _guard_http(monkeypatch: pytest.MonkeyPatch, allowed: str | None) -> list[str]:
    """Fail any HTTP request of botocore in this process that is not for `allowed`."""
    from botocore.httpsession import URLLib3Session

    sent: list[str] = []
    real_send = URLLib3Session.send

    def send(self: Any, request: Any) -> Any:
        sent.append(request.url)
        if allowed is None or not request.url.startswith(allowed):
            raise OffMachineRequest(f"a request left the machine: {request.url}")
        return real_send(self, request)

    monkeypatch.setattr(URLLib3Session, "send", send)
    return sent


@pytest.fixture
def no_account(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No AWS credentials, config or region on this machine, and no HTTP request allowed."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    # As on a laptop, no instance metadata service: v2's Estimator makes a client from boto3's
    # default session (its TensorBoardApp), whose credential lookup would otherwise ask for one
    # (it sends no request with that client; our session never asks).
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return _guard_http(monkeypatch, None)


def _estimator(session: Any, source_dir: Path, **kwargs: Any) -> Any:
    from sagemaker.pytorch import PyTorch

    kwargs = {"entry_point": TRAIN_SCRIPT.name, "image_uri": IMAGE_URI,
              "instance_type": "ml.m5.xlarge", **kwargs}
    return PyTorch(source_dir=str(source_dir), role=LOCAL_ROLE, sagemaker_session=session,
                   **kwargs)


def test_without_an_aws_account_the_session_answers_identity_bucket_and_transfers(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, tmp_path: Path
) -> None:
    """Region, account, role and the default bucket, uploads (multipart too) and downloads:
    all answered here, without a credential, a config or a single HTTP request."""
    from sagemaker.s3 import S3Downloader, S3Uploader

    session = local_session.official_session()
    assert isinstance(session, sdk_offline.Session)
    assert session.boto_region_name == "us-east-1"
    assert session.default_bucket() == BUCKET and session.account_id() == "000000000000"
    assert sdk_offline.get_execution_role(session) == LOCAL_ROLE

    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    big = bytes(range(256)) * (36 * 1024 + 7)  # 9 MiB and a bit: s3transfer goes multipart
    (data / "big.bin").write_bytes(big)
    (data / "sub" / "small.txt").write_text("small")
    assert session.upload_data(str(data), key_prefix="in") == f"s3://{BUCKET}/in"
    folder = local_session.home / "buckets" / BUCKET
    assert (folder / "in" / "big.bin").read_bytes() == big
    assert not (local_session.home / "buckets" / ".multipart").exists() or not any(
        (local_session.home / "buckets" / ".multipart").iterdir())

    assert sorted(S3Downloader.list(f"s3://{BUCKET}/in", sagemaker_session=session)) == [
        f"s3://{BUCKET}/in/big.bin", f"s3://{BUCKET}/in/sub/small.txt"]
    assert S3Downloader.read_file(f"s3://{BUCKET}/in/sub/small.txt", session) == "small"
    S3Uploader.upload_string_as_file_body("text", f"s3://{BUCKET}/notes/a.txt", None, session)
    assert (folder / "notes" / "a.txt").read_text() == "text"
    got = session.download_data(str(tmp_path / "back"), BUCKET, key_prefix="in")
    assert sorted(Path(p).relative_to(tmp_path / "back").as_posix() for p in got) == [
        "big.bin", "sub/small.txt"]
    assert (tmp_path / "back" / "big.bin").read_bytes() == big

    with pytest.raises(ClientError, match="ListEndpoints is not answered on this machine"):
        session.sagemaker_client.list_endpoints()
    assert no_account == []


def test_a_v2_estimator_runs_two_hosts_here_with_its_logs_model_and_data(
    sdk: Any, aws_env: str, s3_bucket: str, local_session: LocalSession, source_dir: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`PyTorch(instance_type="ml.m5.xlarge", instance_count=2, torch_distributed,
    sagemaker_session=LocalSession().official_session()).fit()`: a CPU type with our image runs
    ddpjob's runtime on two local hosts; the code goes to the local bucket, the data channel
    comes from (moto's) S3, the SDK prints every host's log and finds the model."""
    import boto3
    from sagemaker.s3 import S3Downloader

    sent = _guard_http(monkeypatch, aws_env)
    boto3.client("s3").put_object(Bucket=s3_bucket, Key="data/part-0.txt", Body=b"0123")
    session = local_session.official_session()
    estimator = _estimator(
        session, source_dir, instance_count=2, base_job_name="v2-official",
        distribution={"torch_distributed": {"enabled": True}},
        hyperparameters={"expected-world-size": 2, "tag": "official", "steps": 2},
    )  # fmt: skip
    estimator.fit({"training": f"s3://{s3_bucket}/data"}, wait=False)
    name = estimator.latest_training_job.name
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")

    capsys.readouterr()
    session.logs_for_job(name, wait=True)  # the SDK's own log printing, from our log streams
    printed = capsys.readouterr().out
    assert "rank 0 of 2 wrote result.json (tag official)" in printed
    for host in ("algo-1", "algo-2"):
        assert f"host {host} finished with exit code 0" in printed
    assert "training: 1 objects" in log_text(local_session, name, "algo-1")

    request = json.loads((local_session.job_dir(name) / "request.json").read_text())
    code = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
    assert code == f"s3://{BUCKET}/{name}/source/sourcedir.tar.gz"
    assert (local_session.home / "buckets" / BUCKET / name / "source").is_dir()
    assert estimator.model_data == f"s3://{BUCKET}/{name}/output/model.tar.gz"
    S3Downloader.download(estimator.model_data, str(source_dir.parent / "model"),
                          sagemaker_session=session)
    with tarfile.open(source_dir.parent / "model" / "model.tar.gz") as tar:
        result = json.loads(tar.extractfile("result.json").read())
    assert result["hosts"] == ["algo-1", "algo-2"] and result["world_size"] == 2
    summaries = session.sagemaker_client.list_training_jobs(NameContains="v2-official")
    assert [s["TrainingJobName"] for s in summaries["TrainingJobSummaries"]] == [name]
    assert all(url.startswith(aws_env) for url in sent)  # the data channel's bucket only
    assert_no_processes(local_session.home)


def test_log_streams_page_like_cloudwatch(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One stream per host named `<job>/algo-N-<epoch>`; forward and backward tokens page
    through a host's lines without a gap or a repeat; FilterLogEvents searches every stream;
    a token this machine did not give out is CloudWatch's InvalidParameterException."""
    (source_dir / "lines.py").write_text("for i in range(5):\n    print(f'line {i}', flush=True)\n")
    session = local_session.official_session()
    estimator = _estimator(session, source_dir, entry_point="lines.py", instance_count=2)
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")

    logs = session.boto_session.client("logs")
    group = "/aws/sagemaker/TrainingJobs"
    epoch = int(job["CreationTime"].timestamp())
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=f"{name}/")
    names = [s["logStreamName"] for s in streams["logStreams"]]
    assert names == [f"{name}/algo-1-{epoch}", f"{name}/algo-2-{epoch}"]

    lines = log_text(local_session, name, "algo-2").splitlines()
    forward, token = [], None
    while True:
        page = logs.get_log_events(logGroupName=group, logStreamName=names[1], limit=3,
                                   startFromHead=True, **({"nextToken": token} if token else {}))
        if not page["events"]:
            break
        forward += [e["message"] for e in page["events"]]
        token = page["nextForwardToken"]
    assert forward == lines and "line 4" in lines
    last = logs.get_log_events(logGroupName=group, logStreamName=names[1], limit=2)
    assert [e["message"] for e in last["events"]] == lines[-2:]
    before = logs.get_log_events(logGroupName=group, logStreamName=names[1], limit=2,
                                 nextToken=last["nextBackwardToken"])
    assert [e["message"] for e in before["events"]] == lines[-4:-2]

    found = logs.filter_log_events(logGroupName=group, logStreamNamePrefix=name,
                                   filterPattern="line 3")
    assert sorted(e["logStreamName"] for e in found["events"]) == names
    named = logs.filter_log_events(logGroupName=group, logStreamNames=names[1:])
    assert [e["message"] for e in named["events"]] == lines
    with pytest.raises(ClientError, match="log group does not exist"):
        logs.describe_log_streams(logGroupName="/aws/other", logStreamNamePrefix=f"{name}/")

    monkeypatch.setattr(log_streams, "READ_BLOCK", 7)  # backwards over many small blocks
    backward, token = [], None
    while True:
        page = logs.get_log_events(logGroupName=group, logStreamName=names[1], limit=3,
                                   **({"nextToken": token} if token else {}))
        if not page["events"]:
            break
        backward = [e["message"] for e in page["events"]] + backward
        token = page["nextBackwardToken"]
    assert backward == lines

    hostile = ["x", "f/-1", "b/1e9", "f/99999999999", "f/٣", "[" * 5000, "{}" * 3]
    for token in hostile:
        with pytest.raises(ClientError, match="InvalidParameterException.*nextToken is invalid"):
            logs.get_log_events(logGroupName=group, logStreamName=names[1], nextToken=token)
        with pytest.raises(ClientError, match="InvalidParameterException"):
            logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=f"{name}/",
                                      nextToken=token)
    for token in ["[" * 5000, '{"a": -1}', '{"a": "1"}', "[]", "not json"]:
        with pytest.raises(ClientError, match="InvalidParameterException"):
            logs.filter_log_events(logGroupName=group, logStreamNames=names, nextToken=token)
    assert no_account == []


def test_a_failure_and_a_stop_reach_the_sdk(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path
) -> None:
    """A failing script: the SDK's wait raises with our FailureReason. A running job stopped
    through the SDK ends Stopped, and leaves no process behind."""
    from sagemaker.exceptions import UnexpectedStatusException

    (source_dir / "fail.py").write_text("raise ValueError('boom from the user script')\n")
    (source_dir / "sleep.py").write_text("import time\nprint('sleeping', flush=True)\n"
                                         "time.sleep(600)\n")
    session = local_session.official_session()
    failing = _estimator(session, source_dir, entry_point="fail.py", instance_count=1)
    failing.fit(wait=False)
    job = wait_until_ended(local_session, failing.latest_training_job.name)
    with pytest.raises(UnexpectedStatusException) as error:
        failing.latest_training_job.wait(logs="None")
    assert "ValueError: boom from the user script" in job["FailureReason"]
    assert job["FailureReason"] in str(error.value)

    sleeping = _estimator(session, source_dir, entry_point="sleep.py", instance_count=2)
    sleeping.fit(wait=False)
    name = sleeping.latest_training_job.name
    log = local_session.job_dir(name) / "logs" / "algo-2.log"
    wait_for(lambda: log.is_file() and "sleeping" in log.read_text(), 120, "the script to run")
    sleeping.latest_training_job.stop()
    assert wait_until_ended(local_session, name)["TrainingJobStatus"] == "Stopped"
    assert_no_processes(local_session.home)
    assert no_account == []


def test_a_keep_alive_job_leaves_a_warm_pool_that_the_sdks_update_ends(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path
) -> None:
    """`keep_alive_period_in_seconds` through the official SDK: the ended job's description
    answers WarmPoolStatus Available, and `Session.update_training_job(resource_config=
    {"KeepAlivePeriodInSeconds": 0})` ends the pool (Terminated, no process left); a job with no
    pool is refused as SageMaker refuses it."""
    session = local_session.official_session()
    job_arguments = {"instance_count": 1, "distribution": {"torch_distributed": {"enabled": True}},
                     "hyperparameters": {"expected-world-size": 1, "tag": "warm", "steps": 1}}
    estimator = _estimator(session, source_dir, keep_alive_period_in_seconds=600, **job_arguments)
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name

    def pool_status() -> str:
        return session.describe_training_job(name)["WarmPoolStatus"]["Status"]

    try:
        job = wait_until_ended(local_session, name)
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        assert wait_for(lambda: pool_status() == "Available", 60, "the pool to be available")
        session.update_training_job(name, resource_config={"KeepAlivePeriodInSeconds": 0})
        wait_for(lambda: pool_status() == "Terminated", 60, "the pool to end")
    finally:  # whatever happened, no pool outlives the test
        for pool in local_session.warm_pools():
            if pool["Status"] != "Terminated":
                local_session.stop_warm_pool(pool["Name"])
    assert_no_processes(local_session.home)

    cold = _estimator(session, source_dir, **job_arguments)
    cold.fit(wait=False)
    other = cold.latest_training_job.name
    assert wait_until_ended(local_session, other)["TrainingJobStatus"] == "Completed"
    assert "WarmPoolStatus" not in session.describe_training_job(other)
    with pytest.raises(ClientError, match="has no warm pool"):
        session.update_training_job(other, resource_config={"KeepAlivePeriodInSeconds": 0})
    assert no_account == []


@pytest.mark.parametrize(("change", "expected"), [
    ({"instance_type": "ml.g5.xlarge"}, "InstanceType 'ml.g5.xlarge' cannot run in local mode"),
    ({"image_uri": None, "framework_version": "2.8.0", "py_version": "py312",
      "instance_type": "ml.g5.xlarge"}, "with the GPU image"),
    ({"input_mode": "Pipe"}, "input_mode 'Pipe' cannot run locally"),
    ({"instance_count": None, "instance_type": None, "instance_groups": "two"},
     "instance_groups cannot run locally"),
])
def test_what_cannot_run_here_is_refused_in_one_line_before_anything_starts(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path,
    change: dict[str, Any], expected: str,
) -> None:
    from sagemaker.instance_group import InstanceGroup

    session = local_session.official_session()
    if change.get("instance_groups") == "two":
        change["instance_groups"] = [InstanceGroup("a", "ml.m5.xlarge", 1),
                                     InstanceGroup("b", "ml.c5.xlarge", 1)]
    with pytest.raises((ClientError, UserInputError)) as error:
        _estimator(session, source_dir, **{"instance_count": 2, **change}).fit(wait=False)
    assert expected in str(error.value) and "\n" not in str(error.value)
    assert local_session.list() == []
    assert no_account == []


def test_without_an_image_a_cpu_type_runs_sagemakers_pytorch_container_toolkit_here(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path
) -> None:
    """No image_uri: the official SDK picks SageMaker's PyTorch DLC, whose own toolkit runs the
    script on the local host; the code archive comes from the local bucket's folder."""
    (source_dir / "dlc.py").write_text(
        "import os\nprint('entry=' + os.environ['SM_USER_ENTRY_POINT'], flush=True)\n"
        "open(os.path.join(os.environ['SM_MODEL_DIR'], 'ok.txt'), 'w').write('ok')\n")
    session = local_session.official_session()
    estimator = _estimator(session, source_dir, entry_point="dlc.py", image_uri=None,
                           framework_version="2.5", py_version="py311", instance_count=1)
    estimator.fit(wait=False)
    name = estimator.latest_training_job.name
    job = wait_until_ended(local_session, name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "pytorch-training:2.5" in job["AlgorithmSpecification"]["TrainingImage"]
    log = log_text(local_session, name, "algo-1")
    assert "entry=dlc.py" in log and "sagemaker-training-toolkit" in log
    archive = local_session.home / "buckets" / estimator.model_data.removeprefix("s3://")
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["ok.txt"]
    assert_no_processes(local_session.home)
    assert no_account == []


def test_objects_of_the_local_bucket_folder_are_what_s3_answers(
    no_account: list[str], local_session: LocalSession
) -> None:
    """An object written into the local bucket's folder is what S3 GetObject answers."""
    folder = local_session.home / "buckets" / BUCKET / "x"
    folder.mkdir(parents=True)
    with tarfile.open(folder / "m.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"a"))
    s3 = local_session.official_session().boto_session.client("s3")
    body = s3.get_object(Bucket=BUCKET, Key="x/m.tar.gz")["Body"].read()
    assert body == (folder / "m.tar.gz").read_bytes()
    assert s3.get_object(Bucket=BUCKET, Key="x/m.tar.gz", Range="bytes=0-1")["Body"].read() == (
        body[:2])
    with pytest.raises(ClientError, match="NoSuchKey"):
        s3.get_object(Bucket=BUCKET, Key="x/none")
    s3.put_object(Bucket=BUCKET, Key="x/sub/b.txt", Body=b"bb")
    assert s3.head_object(Bucket=BUCKET, Key="x/sub/b.txt")["ContentLength"] == 2
    first = s3.list_objects_v2(Bucket=BUCKET, Prefix="x/", MaxKeys=1)
    rest = s3.list_objects_v2(Bucket=BUCKET, Prefix="x/", ContinuationToken=first[
        "NextContinuationToken"])
    assert [o["Key"] for o in first["Contents"] + rest["Contents"]] == ["x/m.tar.gz",
                                                                       "x/sub/b.txt"]
    folders = s3.list_objects_v2(Bucket=BUCKET, Prefix="x/", Delimiter="/")
    assert [p["Prefix"] for p in folders["CommonPrefixes"]] == ["x/sub/"]
    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "x/sub/b.txt"}]})
    with pytest.raises(ClientError, match="404"):
        s3.head_object(Bucket=BUCKET, Key="x/sub/b.txt")
    s3.put_object(Bucket=BUCKET, Key="../escape", Body=b"x")  # a key as any other (S3's)
    assert s3.get_object(Bucket=BUCKET, Key="../escape")["Body"].read() == b"x"
    assert not (local_session.home / "buckets" / "escape").exists()
    with pytest.raises(ClientError, match="PutBucketPolicy is not answered on this machine"):
        s3.put_bucket_policy(Bucket=BUCKET, Policy="{}")
    assert no_account == []


def test_a_v2_estimators_request_is_admitted_as_the_dry_run_accepts_it(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path
) -> None:
    """What the official SDK v2 sends (spot, checkpoints, 2 hosts): the dry run accepts it
    unchanged and `submit` admits it (tests/local/test_admission.py)."""
    (source_dir / "plain.py").write_text("print('plain', flush=True)\n")
    session = local_session.official_session()
    sent: list[dict[str, Any]] = []
    session.sagemaker_client.meta.events.register(
        "before-parameter-build.sagemaker.CreateTrainingJob",
        lambda params, **_: sent.append(copy.deepcopy(params)))
    estimator = _estimator(session, source_dir, entry_point="plain.py", instance_count=2,
                           use_spot_instances=True, max_run=600, max_wait=900,
                           checkpoint_s3_uri="s3://sagemaker-local/ckpt/v2")
    estimator.fit(wait=False)
    local_session.stop(estimator.latest_training_job.name)
    wait_until_ended(local_session, estimator.latest_training_job.name)
    job = assert_admitted_once(local_session, {**sent[0], "TrainingJobName": "v2-again"})
    assert job.hosts == ("algo-1", "algo-2") and job.spot and job.max_wait_s == 900
    assert job.checkpoint is not None and job.submit_directory.startswith("s3://")
    assert no_account == []


def test_the_v2_tuner_runs_its_trials_here_and_finds_the_best_estimator(
    sdk_offline: Any, no_account: list[str], local_session: LocalSession, source_dir: Path
) -> None:
    """`sagemaker.tuner.HyperparameterTuner(...).fit()` on a session from `official_session()`
    (the official SDK's local mode refuses tuning: aws/sagemaker-python-sdk#1960): its trials
    run here; `wait`, `best_training_job`, `best_estimator`, `analytics().dataframe()`,
    `attach` and `describe` read our answers."""
    from sagemaker.tuner import ContinuousParameter, HyperparameterTuner

    (source_dir / "level.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--level', type=float)\nargs, _ = parser.parse_known_args()\n"
        "print(f'loss={(args.level - 3) ** 2:.6f}', flush=True)\n")
    session = local_session.official_session()
    estimator = _estimator(session, source_dir, entry_point="level.py", instance_count=1)
    tuner = HyperparameterTuner(
        estimator, "loss", {"level": ContinuousParameter(0, 6)}, objective_type="Minimize",
        metric_definitions=[{"Name": "loss", "Regex": r"loss=([0-9.]+)"}], strategy="Random",
        max_jobs=3, max_parallel_jobs=2, random_seed=3, base_tuning_job_name="v2-tune")
    tuner.fit(wait=False)
    tuner.wait()
    described = tuner.describe()
    assert described["HyperParameterTuningJobStatus"] == "Completed", described
    assert described["ObjectiveStatusCounters"]["Succeeded"] == 3
    best = tuner.best_training_job()
    frame = tuner.analytics().dataframe()
    assert sorted(frame["TrainingJobName"]) == sorted(
        s["TrainingJobName"] for s in session.sagemaker_client
        .list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=tuner.latest_tuning_job.name)["TrainingJobSummaries"])
    assert frame.sort_values("FinalObjectiveValue").iloc[0]["TrainingJobName"] == best
    assert tuner.best_estimator().latest_training_job.name == best
    attached = HyperparameterTuner.attach(tuner.latest_tuning_job.name, sagemaker_session=session)
    assert attached.best_training_job() == best
    assert_no_processes(local_session.home)
    assert no_account == []
