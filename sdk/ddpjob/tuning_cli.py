"""`ddpjob tuning-jobs list|describe|stop|logs`: hyperparameter tuning jobs, local or on
SageMaker, read through the session's SageMaker client (boto3's, or the local one of its
shape); each tuning job's trials are listed under it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ddpjob import log_lines
from ddpjob.errors import UserInputError


def add_parser(commands: argparse._SubParsersAction,
               add_backend_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """The `tuning-jobs` subcommand."""
    parser = commands.add_parser(
        "tuning-jobs", help="list, describe, stop or print the logs of tuning jobs",
        description="Hyperparameter tuning jobs: `list` (each with its trials), `describe NAME` "
                    "(DescribeHyperParameterTuningJob as JSON; ddpjob's diagnostics of its "
                    "trials on stderr), `stop NAME`, `logs NAME` "
                    "(every trial's log lines, headed by the trial).")
    parser.add_argument("tuning_command", choices=("list", "describe", "stop", "logs"))
    parser.add_argument("name", nargs="?", help="the tuning job (describe, stop, logs)")
    add_backend_options(parser)


def _trial_line(trial: dict[str, Any]) -> str:
    objective = trial.get("FinalHyperParameterTuningJobObjectiveMetric")
    value = f"{objective['MetricName']}={objective['Value']:g}" if objective else "no objective"
    tuned = " ".join(f"{k}={v}" for k, v in sorted(trial["TunedHyperParameters"].items()))
    return f"  {trial['TrainingJobName']}\t{trial['TrainingJobStatus']}\t{value}\t{tuned}"


def run(args: argparse.Namespace, session: Any) -> int:
    """Carry out `args.tuning_command` on `session`'s tuning jobs."""
    client = session.sagemaker_client
    if args.tuning_command == "list":
        page = client.list_hyper_parameter_tuning_jobs(SortBy="CreationTime",
                                                       SortOrder="Descending", MaxResults=100)
        for job in page["HyperParameterTuningJobSummaries"]:
            name = job["HyperParameterTuningJobName"]
            print(f"{name}\t{job['HyperParameterTuningJobStatus']}\t"
                  f"{job['CreationTime'].isoformat(timespec='seconds')}")
            for trial in session.tuning_job_trials(name):
                print(_trial_line(trial))
        return 0
    if not args.name:
        raise UserInputError(f"tuning-jobs {args.tuning_command}: name the tuning job")
    if args.tuning_command == "describe":
        print(json.dumps(session.describe_tuning_job(args.name), indent=2, default=str))
        for line in session.tuning_diagnostics(args.name):  # ddpjob's, not in AWS's answer
            print(f"diagnostic: {line}", file=sys.stderr)
    elif args.tuning_command == "stop":
        session.stop_tuning_job(args.name)
        print(f"{args.name}: stopping")
    else:
        for trial in session.tuning_job_trials(args.name):
            for host, line in session.logs(trial["TrainingJobName"], follow=False):
                print(f"{trial['TrainingJobName']} {log_lines.shown(host, line)}", flush=True)
    return 0
