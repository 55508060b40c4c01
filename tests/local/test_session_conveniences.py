"""The official SDK's notebook conveniences on `LocalSession`: a folder-backed default bucket
whose URIs local jobs read, and the same wait/logs calls as on SageMaker."""

from __future__ import annotations

import stat
import textwrap
import uuid

import ddpjob
import pytest
from ddpjob.errors import JobFailedError, UserInputError
from ddpjob.local.session import LOCAL_BUCKET, LOCAL_ROLE

from tests.local.conftest import source_tar, training_request


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("hello from the bucket")
    (folder / "sub" / "b.txt").write_text("b")
    return folder


def test_default_bucket_is_a_private_folder_of_the_home(session):
    assert session.default_bucket() == LOCAL_BUCKET
    folder = session.home / "buckets" / LOCAL_BUCKET
    assert folder.is_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_upload_data_writes_into_the_home_and_answers_file_uris(session, data):
    root = session.home / "buckets" / LOCAL_BUCKET
    assert session.upload_data(str(data / "a.txt")) == (root / "data" / "a.txt").as_uri()
    assert session.upload_data(data, key_prefix="train") == (root / "train").as_uri()
    copied = root / "train" / "sub" / "b.txt"
    assert copied.read_text() == "b"
    assert stat.S_IMODE(copied.stat().st_mode) == 0o600


def test_download_data_reads_the_local_bucket(session, data, tmp_path):
    session.upload_data(str(data), key_prefix="train")
    found = session.download_data(str(tmp_path / "back"), LOCAL_BUCKET, "train")
    assert sorted(found) == [str(tmp_path / "back" / "a.txt"),
                             str(tmp_path / "back" / "sub" / "b.txt")]
    assert session.download_data(str(tmp_path / "none"), LOCAL_BUCKET, "absent") == []


def test_a_key_prefix_outside_the_local_bucket_is_refused(session, data):
    with pytest.raises(UserInputError, match="key_prefix '../escape' refused"):
        session.upload_data(str(data), key_prefix="../escape")
    assert not (session.home / "buckets" / "escape").exists()


def test_s3_uris_of_the_local_bucket_name_its_folder(session):
    folder = session.home / "buckets" / LOCAL_BUCKET
    assert session.check_location(f"s3://{LOCAL_BUCKET}/out/run-1", "output_path") == (
        (folder / "out" / "run-1").as_uri())
    assert session.check_location(f"s3://{LOCAL_BUCKET}", "output_path") == folder.as_uri() + "/"
    # A key the folder cannot keep apart (`out//x` would write `out/x`): one error naming it.
    for key in ("out/../../x", "out//x", "out//"):
        with pytest.raises(UserInputError, match=f"output_path s3://{LOCAL_BUCKET}/{key}: the "
                                                 f"local bucket is a folder"):
            session.check_location(f"s3://{LOCAL_BUCKET}/{key}", "output_path")
    assert session.check_location("s3://another-bucket/out", "output_path") == (
        "s3://another-bucket/out")  # a real S3 bucket


def test_an_estimator_names_the_local_bucket_by_its_folder(session, tmp_path):
    from ddpjob import PyTorch

    (tmp_path / "train.py").write_text("print('hi')\n")
    estimator = PyTorch(entry_point="train.py", source_dir=str(tmp_path), instance_type="local",
                        session=session, checkpoint_s3_uri=f"s3://{LOCAL_BUCKET}/ckpt/run-1")
    folder = session.home / "buckets" / LOCAL_BUCKET
    assert estimator.checkpoint_s3_uri == (folder / "ckpt" / "run-1").as_uri()


def test_boto_region_name_is_the_configured_region_or_none(session, monkeypatch):
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert session.boto_region_name is None
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert session.boto_region_name == "eu-central-1"


def test_get_execution_role_of_a_local_session_is_its_placeholder(session):
    assert ddpjob.get_execution_role(session) == LOCAL_ROLE


@pytest.mark.parametrize(("seconds", "shown"), [({"timeout": 10**400}, "an integer of 401 digits"),
                                               ({"poll": float("nan")}, "nan")])
def test_a_wait_no_float_holds_is_one_error_before_the_job_is_read(session, seconds, shown):
    (name,) = seconds
    with pytest.raises(UserInputError,
                       match=f"{name} must be a finite number of seconds >= 0, got {shown}$"):
        session.logs_for_job("no-such-job", wait=True, **seconds)


@pytest.mark.slow
def test_uploaded_data_reaches_a_local_job_that_is_waited_for(session, data, tmp_path, capsys):
    script = tmp_path / "show.py"
    script.write_text(textwrap.dedent("""\
        import os, sys
        print(open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "a.txt")).read(), flush=True)
        sys.exit(int(os.environ.get("SM_HP_EXIT_CODE", "0")))
    """))
    source = source_tar(tmp_path / "src", script)
    channel = {"InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": session.upload_data(str(data), key_prefix="train"),
        "S3DataDistributionType": "FullyReplicated"}}}]}

    good = f"conv-{uuid.uuid4().hex[:8]}"
    session.sagemaker_client.create_training_job(**training_request(
        session, good, source, "show.py", workers=1, distributed=False, **channel))
    described = session.logs_for_job(good, wait=True, poll=0.2)
    assert described["TrainingJobStatus"] == "Completed"
    assert "[algo-1] hello from the bucket" in capsys.readouterr().out
    assert session.wait_for_job(good, poll=0.2)["TrainingJobStatus"] == "Completed"

    bad = f"conv-{uuid.uuid4().hex[:8]}"
    session.sagemaker_client.create_training_job(**training_request(
        session, bad, source, "show.py", workers=1, distributed=False,
        hyperparameters={"exit_code": "3"}, **channel))
    with pytest.raises(JobFailedError, match=f"Training job {bad} ended Failed"):
        session.wait_for_job(bad, poll=0.2)
