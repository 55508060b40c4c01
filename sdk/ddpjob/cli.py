"""`ddpjob`: run, list, describe, follow, stop and download training jobs from a shell.

Exit codes: 0 success, 1 the job failed or was stopped, 2 bad input (arguments, spec, config
file), 3 the control plane or storage refused (AWS, S3, no such job, a job that already ended)
or ddpjob failed, 141 (quietly, as git) once the output's reader left (`| head`). Errors: 1 line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ddpjob import backends, interrupt_cli, log_lines, pools_cli, tuning_cli
from ddpjob.config import Config, load_config, load_spec, merge_defaults, resolve_backend
from ddpjob.errors import (
    ControlPlaneError,
    DdpjobError,
    JobFailedError,
    JobNotFoundError,
    UserInputError,
)

EXIT_OK, EXIT_JOB_FAILED, EXIT_BAD_INPUT, EXIT_SERVICE, EXIT_BROKEN_PIPE = 0, 1, 2, 3, 128 + 13
MAX_LIST_RESULTS = 100  # ListTrainingJobs' MaxResults limit
DEBUG_ENV = "DDPJOB_DEBUG"  # set: unexpected errors show their traceback
_CONFIG_HELP = "defaults file (default: $DDPJOB_CONFIG or ~/.ddpjob/config.yaml)"


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, but usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _hyperparameter(text: str) -> tuple[str, Any]:
    """`lr=0.1` -> ("lr", 0.1): JSON values keep their type (numbers, true/false, lists), YAML's
    true/yes/1.5 too; anything else (`name=resnet`, `day=2024-01-01`) stays a string."""
    key, value = _key_value(text)
    with contextlib.suppress(ValueError):
        return key, json.loads(value)
    import yaml

    try:
        scalar = yaml.safe_load(value)
    except yaml.YAMLError:
        return key, value
    return key, scalar if isinstance(scalar, (bool, int, float)) else value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _int_at_least(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            allowed = f"between {low} and {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be an integer {allowed}, got {text!r}")
        return value

    return parse


def _add_backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=backends.NAMES,
                        help="where jobs run (default: what the instance type implies, else "
                             "the config file's backend, else local)")
    parser.add_argument("--config", help=_CONFIG_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every `ddpjob` command."""
    parser = _ArgumentParser(prog="ddpjob", description=__doc__.split("\n\n")[0],
                             epilog=__doc__.split("\n\n")[1])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser,
                                     metavar="COMMAND")
    _add_run(commands)
    _add_job_commands(commands)
    cache = commands.add_parser("cache", help="the local jobs' cache of S3 objects",
                                description="Show or empty the cache of s3:// channel objects "
                                            "under the local home (limit: DDPJOB_CACHE_MAX_GB).")
    cache.add_argument("cache_command", choices=("info", "clear"))
    cache.add_argument("--config", help=_CONFIG_HELP)
    pools_cli.add_parser(commands, _CONFIG_HELP)
    interrupt_cli.add_parser(commands, _CONFIG_HELP)
    tuning_cli.add_parser(commands, _add_backend_options)
    return parser


def _add_run(commands: argparse._SubParsersAction) -> None:
    """`run`: a job from a YAML spec and/or flags."""
    run = commands.add_parser("run", help="start a training job from a YAML spec and/or flags",
                              description="Start a training job; flags override the spec's "
                                          "keys, the config file fills in defaults.")
    run.add_argument("-f", "--spec", help="YAML job spec (estimator arguments, inputs, job_name)")
    run.add_argument("--entry-point", help="the training script (relative to --source-dir)")
    run.add_argument("--source-dir", help="folder packed and shipped with the script")
    run.add_argument("--instance-count", type=_int_at_least(1), help="hosts (default 1)")
    run.add_argument("--instance-type", help=backends.INSTANCE_TYPES_ALLOWED)
    run.add_argument("--distribution", type=_json_object,
                     help='JSON, e.g. \'{"torch_distributed": {"enabled": true}}\'')
    run.add_argument("--processes-per-host", type=_int_at_least(1),
                     help="workers per host (CPU)")
    run.add_argument("--hyperparameter", "--hp", dest="hyperparameters", action="append",
                     type=_hyperparameter, default=[], metavar="KEY=VALUE")
    run.add_argument("--input", dest="inputs", action="append", type=_key_value, default=[],
                     metavar="CHANNEL=URI")
    run.add_argument("--checkpoint-uri", dest="checkpoint_s3_uri",
                     help="s3://… (or a local folder for local jobs) for checkpoints")
    run.add_argument("--output-path", help="where model.tar.gz goes (s3://… or a local folder)")
    run.add_argument("--role", help="IAM role ARN of SageMaker jobs")
    run.add_argument("--image-uri", help="the ddpjob image of SageMaker jobs (ECR)")
    run.add_argument("--job-name")
    run.add_argument("--no-wait", action="store_true",
                     help="print the job's name once it is submitted and return")
    run.add_argument("--dry-run", action="store_true",
                     help="print the CreateTrainingJob request; submit nothing")
    _add_backend_options(run)


def _add_job_commands(commands: argparse._SubParsersAction) -> None:
    """`jobs list|describe`, `logs`, `stop` and `download`: commands on an existing job."""
    jobs = commands.add_parser("jobs", help="list or describe jobs",
                               description="List or describe training jobs.")
    jobs_commands = jobs.add_subparsers(dest="jobs_command", required=True,
                                        parser_class=_ArgumentParser, metavar="COMMAND")
    listing = jobs_commands.add_parser("list", help="the most recent jobs, newest first",
                                       description="NAME<tab>STATUS<tab>CREATED, newest first.")
    listing.add_argument("--max", type=_int_at_least(1, MAX_LIST_RESULTS), default=20,
                         dest="max_results", help="at most this many jobs (1-100, default 20)")
    _add_backend_options(listing)
    describe = jobs_commands.add_parser("describe", help="a job's DescribeTrainingJob as JSON",
                                        description="Print DescribeTrainingJob as JSON.")
    describe.add_argument("name")
    _add_backend_options(describe)

    logs = commands.add_parser("logs", help="print a job's logs, every host prefixed",
                               description="Print a job's log lines as '[algo-N] line'.")
    logs.add_argument("name")
    logs.add_argument("--follow", action="store_true",
                      help="keep following until the job ends; exit 1 if it failed or stopped")
    _add_backend_options(logs)

    stop = commands.add_parser("stop", help="stop a running job",
                               description="Ask the control plane to stop a running job.")
    stop.add_argument("name")
    _add_backend_options(stop)

    stacks = commands.add_parser(
        "stacks", help="print every rank's Python stack of a running local job",
        description="Print every rank's Python stack on every host of a running local job, "
                    "each headed '[algo-N rank R]' and saying whether it waits in a collective "
                    "or is elsewhere (docs/hung-ranks.md). Local jobs only.")
    stacks.add_argument("name")
    _add_backend_options(stacks)

    download = commands.add_parser("download", help="download a job's model or checkpoint",
                                   description="Download model.tar.gz (or, with --checkpoint, "
                                               "a complete checkpoint) into DIR.")
    download.add_argument("name")
    download.add_argument("dir")
    download.add_argument("--checkpoint", action="store_true",
                          help="the latest complete checkpoint instead of model.tar.gz")
    download.add_argument("--step", type=_int_at_least(0),
                          help="with --checkpoint: this step, not the latest")
    _add_backend_options(download)


def _session(args: argparse.Namespace, config: Config, backend: str | None = None):
    """The session of `backend` (default: --backend, else the config's); records where it looks
    in `args.where` for error messages."""
    session = backends.named(backend or args.backend or config.backend).session_type() \
        .from_config(config)
    args.where = session.where
    return session


def _estimator_kwargs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Estimator arguments and fit() arguments from the spec, overridden by flags."""
    spec = load_spec(args.spec) if args.spec else {}
    fit_kwargs = {key: spec.pop(key) for key in ("inputs", "job_name") if key in spec}
    flags = {
        "entry_point": args.entry_point, "source_dir": args.source_dir,
        "instance_count": args.instance_count, "instance_type": args.instance_type,
        "distribution": args.distribution, "checkpoint_s3_uri": args.checkpoint_s3_uri,
        "output_path": args.output_path, "role": args.role, "image_uri": args.image_uri,
    }
    kwargs = {**spec, **{key: value for key, value in flags.items() if value is not None}}
    if args.hyperparameters:
        kwargs["hyperparameters"] = {**(kwargs.get("hyperparameters") or {}),
                                     **dict(args.hyperparameters)}
    if args.processes_per_host is not None:
        kwargs["distribution"] = {**(kwargs.get("distribution") or {}),
                                  "processes_per_host": args.processes_per_host}
    if args.inputs:  # one URI in the spec is the channel "training", as in fit()
        spec_inputs = fit_kwargs.get("inputs") or {}
        spec_inputs = {"training": spec_inputs} if isinstance(spec_inputs, str) else spec_inputs
        fit_kwargs["inputs"] = {**spec_inputs, **dict(args.inputs)}
    if args.job_name:
        fit_kwargs["job_name"] = args.job_name
    if not kwargs.get("entry_point"):
        raise UserInputError("run: an entry point is required (--entry-point or entry_point)")
    return kwargs, fit_kwargs


def _require_role(kwargs: dict[str, Any], config: Config, backend: str) -> None:
    """A backend whose jobs need a role says so before anything touches AWS."""
    policy = backends.named(backend)
    if not policy.requires_role:
        return
    if not kwargs.get("role"):
        where = f" ({config.path})" if config.path else ""
        raise UserInputError(
            f"run: a role is required for {policy.label} jobs: pass --role "
            "arn:aws:iam::<account>:role/<name>, or set role in the job spec or in the config "
            f"file{where}")
    policy.check_role(kwargs["role"])


def _run(args: argparse.Namespace, config: Config) -> int:
    from ddpjob.pytorch import PyTorch

    kwargs, fit_kwargs = _estimator_kwargs(args)
    planned = kwargs.pop("interruptions", None)
    backend, kwargs["instance_type"] = resolve_backend(args.backend, kwargs.get("instance_type"),
                                                       config)
    kwargs = merge_defaults(kwargs, config)
    _require_role(kwargs, config, backend)
    kwargs["session"] = _session(args, config, backend)
    if planned is not None:
        kwargs["session"] = interrupt_cli.rehearsing(kwargs["session"], planned, args.spec)
    estimator = PyTorch(**kwargs)
    if args.dry_run:
        request = estimator.training_job_request(**fit_kwargs)
        print(json.dumps(request, indent=2, sort_keys=True, default=str))
        return EXIT_OK
    if args.no_wait:  # stdout is the job's name only: JOB=$(ddpjob run --no-wait ...)
        with contextlib.redirect_stdout(sys.stderr):
            estimator.fit(wait=False, **fit_kwargs)
        print(estimator.latest_training_job.name)
        return EXIT_OK
    estimator.fit(wait=True, **fit_kwargs)
    print(f"{estimator.latest_training_job.name}: Completed; model: {estimator.model_data}")
    return EXIT_OK


def _jobs(args: argparse.Namespace, config: Config) -> int:
    session = _session(args, config)
    if args.jobs_command == "describe":
        print(json.dumps(session.describe(args.name).raw, indent=2, default=str))
        return EXIT_OK
    jobs = session.list(max_results=args.max_results, SortBy="CreationTime",
                        SortOrder="Descending")
    for job in jobs:
        created = job["CreationTime"]
        if hasattr(created, "isoformat"):
            created = created.isoformat(timespec="seconds")
        attempts = session.describe(job["TrainingJobName"]).attempts  # restarts, interruptions
        print(f"{job['TrainingJobName']}\t{job['TrainingJobStatus']}\t{created}\t"
              f"{attempts} attempt{'s' if attempts > 1 else ''}")
    return EXIT_OK


def _logs(args: argparse.Namespace, config: Config) -> int:
    session = _session(args, config)
    for host, line in session.logs(args.name, follow=args.follow):
        print(log_lines.shown(host, line), flush=True)
    if args.follow:
        from ddpjob.training_job import job_failure

        failure = job_failure(session.describe(args.name))
        if failure is not None:
            raise failure
    return EXIT_OK


def _stop(args: argparse.Namespace, config: Config) -> int:
    session = _session(args, config)
    job = session.describe(args.name)
    if job.is_terminal:
        _error(f"training job {args.name} has already ended ({job.status}); nothing to stop")
        return EXIT_SERVICE
    session.stop(args.name)
    print(f"{args.name}: stopping")
    return EXIT_OK


def _download(args: argparse.Namespace, config: Config) -> int:
    from ddpjob.pytorch import PyTorch

    if args.step is not None and not args.checkpoint:
        raise UserInputError("download: --step needs --checkpoint")
    estimator = PyTorch.attach(args.name, session=_session(args, config), wait=False)
    if args.checkpoint:
        if not estimator.checkpoint_s3_uri:
            raise UserInputError(
                f"download --checkpoint: training job {args.name} has no checkpoint URI (start "
                f"a job with --checkpoint-uri or a spec's checkpoint_s3_uri)")
        path = estimator.download_checkpoint(args.dir, step=args.step)
    else:
        path = estimator.download_model(args.dir)
    print(path)
    return EXIT_OK


def _cache(args: argparse.Namespace, config: Config) -> int:
    session = _session(args, config, backends.LOCAL.name)
    print("\n".join(session.cache_report(clear=args.cache_command == "clear")))
    return EXIT_OK


_COMMANDS = {"run": _run, "jobs": _jobs, "logs": _logs, "stop": _stop, "download": _download,
             "cache": _cache, "pools": pools_cli.run, "interrupt": interrupt_cli.run,
             "stacks": lambda a, c: print(_session(a, c).stacks(a.name), end="") or EXIT_OK,
             "tuning-jobs": lambda a, c: tuning_cli.run(a, _session(a, c))}


def _error(message: str, *, bad_input: bool = False) -> None:
    """One line on stderr, whatever the message holds."""
    line = " ".join(str(message).split())
    print(f"ddpjob: {'error: ' if bad_input else ''}{line}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ddpjob` command; returns its exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or a usage error already printed on one line
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        config = load_config(args.config)
        if getattr(args, "name", None) is not None:
            from ddpjob.naming import check_job_name

            check_job_name(args.name, "NAME")
        return _COMMANDS[args.command](args, config)
    except BrokenPipeError:  # the reader went away: nothing to say, and no one to say it to
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush too
        return EXIT_BROKEN_PIPE
    except JobFailedError as exc:  # the cause; its traceback is in the job's logs
        _error(exc.summary)
        return EXIT_JOB_FAILED
    except JobNotFoundError as exc:
        name = getattr(args, "name", None)
        where = getattr(args, "where", None)
        _error(f"no training job named {name!r} in {where}: see `ddpjob jobs list`"
               if name and where else str(exc))
        return EXIT_SERVICE
    except ControlPlaneError as exc:  # the control plane refused, even when it blames the request
        _error(str(exc))
        return EXIT_SERVICE
    except UserInputError as exc:
        _error(str(exc), bad_input=True)
        return EXIT_BAD_INPUT
    except DdpjobError as exc:
        _error(str(exc))
        return EXIT_SERVICE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, (BotoCoreError, ClientError, OSError)):
            _error(str(exc))
            return EXIT_SERVICE
        if os.environ.get(DEBUG_ENV):
            raise
        _error(f"internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the "
               f"traceback)")
        return EXIT_SERVICE


if __name__ == "__main__":
    sys.exit(main())
