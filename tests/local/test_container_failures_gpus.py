"""A request's own container command (as ModelTrainer sends one) on local hosts: a failure names
the host and the script's exception, found in the host's log when the command wrote no
`output/failure` of its own, and hosts of a GPU instance type get their share of the machine's
GPUs. The code channel is on a moto S3 server; the GPUs are ids in CUDA_VISIBLE_DEVICES, with a
stand-in for the machine's `nvidia-smi`. Multi-host container jobs wait for the fixed port 7777:
run under `flock /tmp/ddpjob-port7777.lock`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from ddpjob.local.base import failure_cause
from ddpjob.local.session import LocalSession

from tests.conftest import FIXED_PORT, HOST_NAMESPACES
from tests.local.conftest import assert_no_processes, log_text, training_request, wait_until_ended

# The script fails on one host only, so that the reason must name the right one.
FAILING = """import json
host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
if host == "algo-2":
    raise ValueError("bad lr 7")
print("host", host, "done")
"""
# A script that writes SageMaker's failure file itself and exits without a traceback.
OWN_FAILURE = """import sys
with open("/opt/ml/output/failure", "w") as failure:
    failure.write("bad input: 3 rows have no label")
sys.exit(3)
"""
# A machine's nvidia-smi with four GPUs (the tool is the machine's, not ours: a stand-in).
MACHINE_SMI = """#!/bin/sh
if [ "$1" = "--list-gpus" ]; then
  for i in 0 1 2 3; do echo "GPU $i: NVIDIA H100 (UUID: GPU-000$i)"; done
else
  echo "machine nvidia-smi $*"
fi
"""
# What each host prints: its GPUs, their count as ModelTrainer's environment.py takes it for
# SM_NUM_GPUS (the lines of `nvidia-smi --list-gpus` that start with "GPU ") and the instance
# type it takes for SM_CURRENT_INSTANCE_TYPE.
SHOW_GPUS = ('echo "visible=[$CUDA_VISIBLE_DEVICES] '
             'counted=[$(nvidia-smi --list-gpus | grep -c "^GPU ")]"; '
             'python -c "import json; print(json.load(open(\'/opt/ml/input/config/'
             'resourceconfig.json\'))[\'current_instance_type\'])"')


def _command_request(session: LocalSession, name: str, command: list[str], hosts: int,
                     instance_type: str = "ml.m5.xlarge", **extra: Any) -> dict[str, Any]:
    request = training_request(session, name, "unused", "unused", hosts=hosts, **extra)
    request["HyperParameters"] = {}
    request["ResourceConfig"]["InstanceType"] = instance_type
    request["AlgorithmSpecification"].update(ContainerEntrypoint=command[:1],
                                             ContainerArguments=command[1:])
    return request


def _script_request(session: LocalSession, bucket: str, name: str, script: str,
                    hosts: int) -> dict[str, Any]:
    """A job whose command is `python <script>`, the script in the channel `code`."""
    boto3.client("s3").put_object(Bucket=bucket, Key=f"{name}/train.py", Body=script.encode())
    channel = {"ChannelName": "code", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/{name}/",
        "S3DataDistributionType": "FullyReplicated"}}}
    return _command_request(session, name, ["python", "/opt/ml/input/data/code/train.py"],
                            hosts, InputDataConfig=[channel])


# --- the cause in the host's log (pure) -----------------------------------------------------

# ModelTrainer's basic_script_driver logs the script's output line by line (stripped), then the
# traceback of its own CalledProcessError, and writes that traceback to output/failure.
DRIVER_LOG = """Executing command: /usr/bin/python3 train.py --lr 7
Traceback (most recent call last):
File "/opt/ml/input/data/code/train.py", line 4, in <module>
raise ValueError("bad lr 7")
ValueError: bad lr 7
Command failed with exit code 1. Traceback: Traceback (most recent call last):
  File "/opt/ml/input/data/sm_drivers/common/utils.py", line 160, in execute_commands
    raise subprocess.CalledProcessError(exitcode, commands)
subprocess.CalledProcessError: Command '['python3', 'train.py']' returned non-zero exit status 1.
An error occurred with exit code 1
"""
CHAINED = """Traceback (most recent call last):
  File "train.py", line 2, in <module>
    open("missing")
FileNotFoundError: [Errno 2] No such file or directory: 'missing'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 4, in <module>
    raise RuntimeError("no data")
RuntimeError: no data
"""


# torchrun's own traceback after a worker's, the report naming no rank's exception line.
TORCHRUN_LOG = """Traceback (most recent call last):
  File "/opt/ml/code/train.py", line 9, in <module>
    main()
KeyError: 'labels'
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
"""


def test_the_cause_is_the_scripts_exception_not_the_launchers_report() -> None:
    assert failure_cause.python_exception(TORCHRUN_LOG)[0] == "KeyError: 'labels'"
    exception, traceback = failure_cause.python_exception(DRIVER_LOG)
    assert exception == "ValueError: bad lr 7"
    assert traceback.startswith("Traceback (most recent call last):\nFile \"/opt/ml/input/data/"
                                "code/train.py\", line 4")
    assert traceback.endswith("\nValueError: bad lr 7") and "CalledProcessError" not in traceback
    assert failure_cause.python_exception(CHAINED)[0] == "RuntimeError: no data"


TRACED = DRIVER_LOG[DRIVER_LOG.index("Traceback"):DRIVER_LOG.index("\nCommand failed")]
ROOT_CAUSE = ("Root Cause (first observed failure):\n[0]:\n  rank      : 3 (local_rank: 1)\n"
              "[rank3]: KeyError: 'x'\n")


@pytest.mark.parametrize(("log", "written", "signalled", "expected"), [
    # The traceback's tail follows the headline, unless the program wrote its own text.
    (DRIVER_LOG, "", False, (None, "ValueError: bad lr 7", TRACED)),
    (DRIVER_LOG, "Training Execution failed.", False,
     (None, "ValueError: bad lr 7", "Training Execution failed.")),
    # A signal ended the program: an exception it logged earlier is not the cause.
    (DRIVER_LOG, "", True, (None, "FALLBACK", "")),
    ("epoch 1\n", "bad input", False, (None, "FALLBACK", "bad input")),
    # torchrun's report names the rank, before any traceback.
    (DRIVER_LOG + ROOT_CAUSE, "", False, (3, "KeyError: 'x'", "")),
])
def test_program_cause_reads_the_log_then_falls_back(
        log: str, written: str, signalled: bool, expected: tuple) -> None:
    assert failure_cause.program_cause(log, written, "FALLBACK", signalled=signalled) == expected


# --- failing jobs --------------------------------------------------------------------------


@pytest.mark.slow
@FIXED_PORT
@HOST_NAMESPACES
def test_a_failing_command_names_the_host_and_the_scripts_exception(
        session: LocalSession, s3_bucket: str) -> None:
    request = _script_request(session, s3_bucket, "command-fails", FAILING, hosts=2)
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, "command-fails")
    reason = job.get("FailureReason", "")
    assert job["TrainingJobStatus"] == "Failed", log_text(session, "command-fails", "algo-2")
    assert reason.startswith("AlgorithmError: host algo-2, exit code 1: ValueError: bad lr 7\n"), \
        reason
    assert 'raise ValueError("bad lr 7")' in reason  # the traceback's tail follows
    assert len(reason) <= 1024
    assert_no_processes(session.home)


@pytest.mark.slow
@HOST_NAMESPACES
def test_a_commands_own_failure_file_is_its_reason(session: LocalSession, s3_bucket: str) -> None:
    request = _script_request(session, s3_bucket, "command-own-failure", OWN_FAILURE, hosts=1)
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, "command-own-failure")
    reason = job.get("FailureReason", "")
    assert job["TrainingJobStatus"] == "Failed"
    assert reason.startswith("AlgorithmError: host algo-1, exit code 3: the container command "
                             "failed: bad input: 3 rows have no label\n"), reason
    assert reason.rstrip().endswith("bad input: 3 rows have no label"), reason
    assert_no_processes(session.home)


# --- GPUs ------------------------------------------------------------------------------------


@pytest.fixture
def four_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine seen with four GPUs: CUDA_VISIBLE_DEVICES and a stand-in nvidia-smi."""
    folder = tmp_path / "machine-bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(MACHINE_SMI)
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")


@pytest.mark.slow
@FIXED_PORT
@HOST_NAMESPACES
@pytest.mark.parametrize(("instance_type", "expected"), [
    ("local_gpu", ["0,1", "2,3"]),  # an equal share of the machine's
    ("ml.g5.12xlarge", ["0,1", "2,3"]),  # 4 GPUs on SageMaker: the share is less
    ("ml.g5.2xlarge", ["0", "2"]),  # 1 GPU on SageMaker: no more here
])
def test_hosts_of_a_gpu_type_get_their_share_of_the_gpus(
        session: LocalSession, four_gpus: None, instance_type: str, expected: list[str]) -> None:
    name = f"gpus-{instance_type.replace('.', '-').replace('_', '-')}"
    request = _command_request(session, name, ["/bin/sh", "-c", SHOW_GPUS], hosts=2,
                               instance_type=instance_type)
    session.sagemaker_client.create_training_job(**request)
    job = wait_until_ended(session, name)
    logs = [log_text(session, name, host) for host in ("algo-1", "algo-2")]
    assert job["TrainingJobStatus"] == "Completed", (job.get("FailureReason"), logs)
    for log, gpus in zip(logs, expected, strict=True):
        assert f"visible=[{gpus}] counted=[{len(gpus.split(','))}]\n{instance_type}\n" in log, log
    assert_no_processes(session.home)


@HOST_NAMESPACES
@pytest.mark.parametrize(("visible", "instance_type", "found"), [
    ("", "ml.g5.12xlarge", 0), ("", "local_gpu", 0), ("0", "ml.p4d.24xlarge", 1)])
def test_a_gpu_type_without_a_gpu_per_host_is_refused_before_the_job_exists(
        session: LocalSession, monkeypatch: pytest.MonkeyPatch, visible: str,
        instance_type: str, found: int) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    request = _command_request(session, "no-gpus", ["/bin/sh", "-c", SHOW_GPUS], hosts=2,
                               instance_type=instance_type)
    with pytest.raises(ClientError) as raised:
        session.sagemaker_client.create_training_job(**request)
    message = raised.value.response["Error"]["Message"]
    assert (f"ResourceConfig.InstanceType {instance_type!r} with InstanceCount 2 needs at least "
            f"2 GPU(s) on this machine, one set per simulated host; found {found}") in message
    assert "\n" not in message and not session.job_dir("no-gpus").exists()
    # A CPU type asks nothing of the GPUs.
    request["ResourceConfig"]["InstanceType"] = "ml.m5.xlarge"
    checked = session.sagemaker_client.control.checked_request(request)
    assert checked["ResourceConfig"]["InstanceCount"] == 2
