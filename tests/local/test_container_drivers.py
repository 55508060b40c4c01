"""ModelTrainer's drivers as its request brings them: what cannot run on local hosts is refused
before the job exists, from the `sm_train.sh` that would run (here in the local bucket)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ddpjob.local.session import LocalSession

# sagemaker.train.templates' EXEUCTE_DISTRIBUTED_DRIVER, as ModelTrainer writes it
DRIVER_LINE = "$SM_PYTHON_CMD /opt/ml/input/data/sm_drivers/distributed_drivers/{}\n"
COMMAND = ("chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh "
           "&& /opt/ml/input/data/sm_drivers/sm_train.sh")


def _request(session: LocalSession, driver: str, hosts: int) -> dict:
    drivers = session.sagemaker_client.bucket_root / "mt" / "sm_drivers"
    drivers.mkdir(parents=True, exist_ok=True)
    (drivers / "sm_train.sh").write_text("#!/bin/bash\nset -e\n" + DRIVER_LINE.format(driver))
    channel = {"ChannelName": "sm_drivers", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": "s3://sagemaker-local/mt/sm_drivers",
        "S3DataDistributionType": "FullyReplicated"}}}
    return {
        "TrainingJobName": f"mt-{driver.split('_')[0]}-{hosts}",
        "AlgorithmSpecification": {
            "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:"
                             "2.5-cpu-py311", "TrainingInputMode": "File",
            "ContainerEntrypoint": ["/bin/bash", "-c"], "ContainerArguments": [COMMAND]},
        "RoleArn": "arn:aws:iam::000000000000:role/ddpjob-local",
        "InputDataConfig": [channel],
        "OutputDataConfig": {"S3OutputPath": "s3://sagemaker-local/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": hosts,
                           "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def test_mpi_over_several_hosts_is_refused_in_one_line_before_the_job_exists(
        session: LocalSession) -> None:
    client = session.sagemaker_client
    request = _request(session, "mpi_driver.py", hosts=2)
    with pytest.raises(client.exceptions.ClientError, match=r"MPI\(\) over several hosts needs "
                                                            r"an SSH daemon.*use Torchrun\(\)"):
        client.create_training_job(**request)
    assert not session.list()


@pytest.mark.parametrize(("driver", "hosts"), [("mpi_driver.py", 1),
                                                ("torchrun_driver.py", 2)])
def test_what_local_hosts_run_is_not_refused(session: LocalSession, driver: str,
                                             hosts: int) -> None:
    checked = session.sagemaker_client.control.checked_request(_request(session, driver, hosts))
    assert checked["ResourceConfig"]["InstanceCount"] == hosts


def test_a_drivers_channel_out_of_the_bucket_is_not_read(session: LocalSession,
                                                         tmp_path: Path) -> None:
    """A key that climbs out of the bucket's folder names nothing to read here."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "sm_train.sh").write_text(DRIVER_LINE.format("mpi_driver.py"))
    request = _request(session, "torchrun_driver.py", hosts=2)
    source = request["InputDataConfig"][0]["DataSource"]["S3DataSource"]
    source["S3Uri"] = "s3://sagemaker-local/../../" + str(tmp_path / "secret").lstrip("/")
    session.sagemaker_client.control.checked_request(request)  # the file outside was never read
