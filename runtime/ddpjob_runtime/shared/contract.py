"""The names of the container contract, spelled once (as sagemaker-training's `params.py`).

Client and runtime import these instead of repeating the strings: hyperparameter names the
platform injects, environment variables, config file and folder names under the job root,
host phases, the job-name pattern and SageMaker's limits.
"""

from __future__ import annotations

# ---------------------------------------------------------------- job root and its files
DEFAULT_ROOT = "/opt/ml"
INPUT_DIR, CONFIG_DIR, DATA_DIR = "input", "input/config", "input/data"
CODE_DIR, MODEL_DIR, OUTPUT_DIR, CHECKPOINTS_DIR = "code", "model", "output", "checkpoints"
HYPERPARAMETERS_FILE = "hyperparameters.json"
RESOURCE_CONFIG_FILE = "resourceconfig.json"
INPUT_DATA_CONFIG_FILE = "inputdataconfig.json"
CHECKPOINT_CONFIG_FILE = "checkpointconfig.json"
PLATFORM_FILE = "platform.json"  # ddpjob's own: addresses, status file, what to stage
SOURCE_ARCHIVE = "sourcedir.tar.gz"

# ---------------------------------------------------------------- platform.json's keys (ddpjob)
PLATFORM_JOB_NAME, PLATFORM_MASTER_PORT = "job_name", "master_port"
PLATFORM_HOST_ADDRESSES = "host_addresses"
PLATFORM_CHANNELS, PLATFORM_STAGED = "channels", "staged"  # a channel: a URI or {"staged": dir}
PLATFORM_OUTPUT_PATH, PLATFORM_STATUS_FILE = "output_path", "status_file"
PLATFORM_CHECKPOINT_URI, PLATFORM_STAGED_CHECKPOINT = "checkpoint_s3_uri", "staged_checkpoint"
PLATFORM_SUBMIT_DIRECTORY = "submit_directory"
PLATFORM_TENSORBOARD = "tensorboard_output_config"  # its {"LocalPath", "S3OutputPath"}
PLATFORM_PYTHON_DIR = "python_dir"  # where a local host makes its own Python env (`pyenv`)
# a local host's stand-ins for libraries only SageMaker's containers have (`smdistributed`)
PLATFORM_STAND_INS = "stand_ins"

# ---------------------------------------------------------------- hyperparameters
# Names starting with these belong to the platform and the runtime, never to the user's script.
RESERVED_PREFIXES = ("sagemaker_", "ddpjob_")
PROGRAM = "sagemaker_program"
SUBMIT_DIRECTORY = "sagemaker_submit_directory"
# what SageMaker adds to a tuning job's static hyperparameters (and its trials'): the objective
TUNING_OBJECTIVE = "_tuning_objective_metric"
CONTAINER_LOG_LEVEL = "sagemaker_container_log_level"
JOB_NAME = "sagemaker_job_name"
REGION = "sagemaker_region"
TORCH_DISTRIBUTED = "sagemaker_torch_distributed_enabled"
PYTORCH_DDP = "sagemaker_pytorch_ddp_enabled"
SMDDP = "sagemaker_distributed_dataparallel_enabled"
SMDDP_MPI_OPTIONS = "sagemaker_distributed_dataparallel_custom_mpi_options"
MPI = "sagemaker_mpi_enabled"
MPI_PROCESSES = "sagemaker_mpi_num_of_processes_per_host"
MPI_OPTIONS = "sagemaker_mpi_custom_mpi_options"
PYTORCH_XLA = "sagemaker_pytorch_xla_multi_worker_enabled"  # SageMaker Training Compiler
INSTANCE_TYPE = "sagemaker_instance_type"
PROCESSES_PER_HOST = "ddpjob_processes_per_host"
MAX_RESTARTS = "ddpjob_max_restarts"  # worker restarts torchrun may do

# ---------------------------------------------------------------- environment variables
# Set by SageMaker and ddpjob on every host: a user's value would be replaced or would break
# the contract, so the estimator refuses them rather than silently overriding them.
RESERVED_ENV_PREFIXES = ("SM_", "DDPJOB_")
ENV_ROOT = "SAGEMAKER_BASE_DIR"
ENV_TRAINING_JOB_NAME = "TRAINING_JOB_NAME"
ENV_CHECKPOINT_DIR = "DDPJOB_CHECKPOINT_DIR"
ENV_CHECKPOINT_URI = "DDPJOB_CHECKPOINT_URI"
ENV_TENSORBOARD_DIR = "DDPJOB_TENSORBOARD_DIR"  # TensorBoardOutputConfig.LocalPath, mapped
ENV_FAILURE_DIR = "DDPJOB_FAILURE_DIR"
# Where each worker registers for stack dumps (`stackdump`): under the host's root, STACKS_DIR.
ENV_STACKS_DIR = "DDPJOB_STACKS_DIR"
STACKS_DIR = "tmp/stacks"
ENV_STATUS_FILE = "DDPJOB_STATUS_FILE"  # the host's status file, for the agent's restarts
ENV_ZYGOTE = "DDPJOB_ZYGOTE"  # the job's template (`zygote`): `PID:PATH` of its unix socket
# The template's last argument: it keeps spare worker interpreters (a warm pool's), or it is one.
ZYGOTE_SPARES_FLAG, ZYGOTE_SPARE_FLAG = "--spares", "--spare"
ZYGOTE_SPARE_ROLE = "spare-worker"  # a spare's process title: `ddpjob-spare-worker FOLDER`
# In a process forked from the template: the pid of its launcher (the process that asked the
# template for it, or the parent of the `forkrun` client that did); its parent is the template.
ENV_LAUNCHER = "DDPJOB_LAUNCHER"
ENV_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"  # torchrun's attempt number, 0 first
# The first host and its rendezvous port: SageMaker's PyTorch container sets both for every job.
ENV_MASTER_ADDR, ENV_MASTER_PORT = "MASTER_ADDR", "MASTER_PORT"
ENV_S3_MULTIPART_THRESHOLD = "DDPJOB_S3_MULTIPART_THRESHOLD"
ENV_S3_MULTIPART_CHUNKSIZE = "DDPJOB_S3_MULTIPART_CHUNKSIZE"
ENV_S3_MAX_CONCURRENCY = "DDPJOB_S3_MAX_CONCURRENCY"

# ---------------------------------------------------------------- the job's log
# CloudWatch: the hosts' log group (a stream per host) and the namespace of the job's metrics
CLOUDWATCH_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# A torchrun worker's every line reaches its host's log as `[rank <global rank>] <line>`
# (torchrun's `--tee` with this prefix template); clients show it as `[algo-1 rank 0] <line>`.
ENV_LOG_LINE_PREFIX = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
RANK_LINE_PREFIX = "[rank ${rank}] "
RANK_LINE_REGEX = r"\[rank (\d+)\] "  # at the start of a line; its group is the rank

# ---------------------------------------------------------------- host phases, in order
HOST_PHASES = ("Starting", "Downloading", "Training", "Uploading", "Done")
REPORTED_PHASES = HOST_PHASES[1:4]  # the ones the runtime writes to its status file

# ---------------------------------------------------------------- names and limits
MAX_JOB_NAME = 63
JOB_NAME_REGEX = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
MAX_HYPERPARAMETERS, MAX_HYPERPARAMETER_NAME, MAX_HYPERPARAMETER_VALUE = 100, 256, 2500
MAX_RESTARTS_LIMIT = 100


def __getattr__(name: str) -> object:
    """`JOB_NAME_PATTERN`: `JOB_NAME_REGEX` compiled on first use, so that the processes that
    import this module and need no `re` (`forkrun`'s clients, several per host) start without."""
    if name != "JOB_NAME_PATTERN":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import re

    globals()[name] = pattern = re.compile(JOB_NAME_REGEX)
    return pattern
