"""`HyperparameterTuner`: the official SDK v2's `sagemaker.tuner.HyperparameterTuner`, for
ddpjob estimators, so that a notebook swaps one import.

    tuner = HyperparameterTuner(estimator, "loss", {"lr": ContinuousParameter(1e-4, 1e-1,
                                "Logarithmic")}, metric_definitions=[{"Name": "loss",
                                "Regex": "loss=([0-9.]+)"}], objective_type="Minimize",
                                strategy="Random", max_jobs=8, max_parallel_jobs=2)
    print(tuner.tuning_job_request())    # the dry run: nothing is uploaded or sent
    tuner.fit({"train": "s3://bucket/train"})

Arguments are checked when the tuner is made, AWS's rules (`rules`) too, each error naming the
argument; `fit` plans the estimator's training job as `estimator.fit` would (`planner`), makes
the CreateHyperParameterTuningJob request from it (`request`), checks it against botocore's
model, and only then uploads the code and inputs and sends it through the session.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpjob_runtime.shared.hyperparameters import is_reserved

from ddpjob import backends, naming, planner, validation
from ddpjob import inputs as inputs_module
from ddpjob.errors import UserInputError
from ddpjob.estimator import Estimator
from ddpjob.tuning import parameters, parity, rules, strategies
from ddpjob.tuning.analytics import HyperparameterTuningJobAnalytics
from ddpjob.tuning.job import TuningJob
from ddpjob.tuning.request import (
    TuningConfig,
    training_job_definition,
    tuned_names,
    tuning_request,
    validate_tuning_request,
)
from ddpjob.tuning.trial_checkpoints import TrialCheckpoints

if TYPE_CHECKING:  # pragma: no cover
    from ddpjob.base_session import BaseSession

logger = logging.getLogger(__name__)

_CONFIG = rules.CONFIG
#: The tuner argument that sets each request member a rule names (the longest prefix wins).
ARGUMENT_OF = {
    "HyperParameterTuningJobName": "job_name",
    f"{_CONFIG}.Strategy": "strategy",
    f"{_CONFIG}.StrategyConfig": "strategy_config",
    f"{_CONFIG}.TrainingJobEarlyStoppingType": "early_stopping_type",
    f"{_CONFIG}.ParameterRanges": "hyperparameter_ranges",
    f"{_CONFIG}.ResourceLimits.MaxNumberOfTrainingJobs": "max_jobs",
    f"{_CONFIG}.HyperParameterTuningJobObjective": "objective_type",
    f"{rules.DEFINITION}.AlgorithmSpecification.MetricDefinitions": "metric_definitions",
    f"{rules.DEFINITION}.StaticHyperParameters": "hyperparameter_ranges",
}
#: v2 arguments ddpjob does not support yet, with the value that means "not used".
_NOT_YET = {"estimator_name": None, "autotune": False, "hyperparameters_to_keep_static": None}


def _argument_error(error: rules.RuleBroken) -> UserInputError:
    keys = [key for key in ARGUMENT_OF if error.member.startswith(key)]
    if not keys:
        return error
    return UserInputError(f"{ARGUMENT_OF[max(keys, key=len)]}: {error.reason}")


def _request_member(value: object, argument: str) -> dict[str, Any] | None:
    """A request member given as a dict or as the official SDK's object (`to_input_req()`:
    WarmStartConfig, StrategyConfig, TuningJobCompletionCriteriaConfig)."""
    if value is None:
        return None
    to_request = getattr(value, "to_input_req", None)
    member = to_request() if callable(to_request) else value
    if not isinstance(member, Mapping):
        raise UserInputError(f"{argument} must be the official SDK's object or a dict in the "
                             f"CreateHyperParameterTuningJob shape, got {type(value).__name__}")
    return dict(member)


def _refuse_unsupported(arguments: Mapping[str, Any]) -> None:
    for name, value in arguments.items():
        if name not in _NOT_YET:
            raise UserInputError(f"HyperparameterTuner got an unexpected argument {name!r}")
        if value != _NOT_YET[name]:
            raise UserInputError(f"{name} is not supported by ddpjob's tuner yet; leave it out "
                                 f"(docs/tuning.md)")


def _one_of(value: object, allowed: tuple[str, ...], argument: str) -> str:
    if value not in allowed:
        raise UserInputError(f"{argument} must be one of {', '.join(allowed)}, got {value!r}")
    return value  # type: ignore[return-value]


def _checked_ranges(ranges: object) -> dict[str, parameters.AnyRange]:
    checked = parameters.check_ranges(ranges)
    reserved = [name for name in checked if is_reserved(name)]
    if reserved:
        raise UserInputError(f"hyperparameter_ranges: {reserved[0]!r} is set by ddpjob (names "
                             f"starting with sagemaker_ or ddpjob_), so it cannot be tuned")
    return checked


class HyperparameterTuner:
    """A hyperparameter tuning job's definition: an estimator, the objective and the ranges.

    Arguments are those of the official SDK v2's `HyperparameterTuner`; `estimator` is a ddpjob
    estimator whose session runs the tuning job (a `Session`: SageMaker; local tuning jobs
    are planned). `warm_start_config`, `strategy_config` and `completion_criteria_config` are
    the official SDK's objects or dicts in the request's shape. On a LocalSession, Bayesian and
    Hyperband need the `tune` extra (Optuna). `metric_definitions` default
    to the estimator's. `estimator_name`, `autotune` and `hyperparameters_to_keep_static` are
    refused (not supported yet).
    """

    TUNING_JOB_NAME_MAX_LENGTH = rules.MAX_NAME

    def __init__(
        self,
        estimator: Estimator,
        objective_metric_name: str,
        hyperparameter_ranges: Mapping[str, Any],
        metric_definitions: list[dict[str, str]] | None = None,
        strategy: str = "Bayesian",
        objective_type: str = "Maximize",
        max_jobs: int | None = None,
        max_parallel_jobs: int = 1,
        max_runtime_in_seconds: int | None = None,
        tags: list[dict[str, str]] | Mapping[str, str] | None = None,
        base_tuning_job_name: str | None = None,
        warm_start_config: Any = None,
        strategy_config: Any = None,
        completion_criteria_config: Any = None,
        early_stopping_type: str = "Off",
        random_seed: int | None = None,
        **unsupported: Any,
    ):
        """Check every argument and AWS's rules now (UserInputError naming the argument)."""
        if not isinstance(estimator, Estimator):
            raise UserInputError(f"estimator must be a ddpjob estimator (ddpjob.PyTorch, "
                                 f"ddpjob.Estimator, ...), got {type(estimator).__name__}")
        _refuse_unsupported(unsupported)
        self.estimator = estimator
        self.objective_metric_name = validation.optional_str(objective_metric_name,
                                                             "objective_metric_name")
        if self.objective_metric_name is None or len(self.objective_metric_name) > 255:
            raise UserInputError(f"objective_metric_name must be a string of 1 to 255 "
                                 f"characters, got {objective_metric_name!r}")
        self._hyperparameter_ranges = _checked_ranges(hyperparameter_ranges)
        self.metric_definitions = validation.metric_definitions(metric_definitions)
        self.strategy = _one_of(strategy, rules.STRATEGIES, "strategy")
        self.objective_type = _one_of(objective_type, rules.OBJECTIVE_TYPES, "objective_type")
        self.early_stopping_type = _one_of(early_stopping_type, rules.EARLY_STOPPING_TYPES,
                                           "early_stopping_type")
        # v2: Grid computes the job count itself; every other strategy defaults to 1 job.
        self.max_jobs = validation.optional_int(max_jobs, "max_jobs") if max_jobs is not None \
            else (None if strategy == "Grid" else 1)
        self.max_parallel_jobs = validation.positive_int(max_parallel_jobs, "max_parallel_jobs")
        self.max_runtime_in_seconds = validation.optional_int(
            max_runtime_in_seconds, "max_runtime_in_seconds", low=120, high=15_768_000)
        self.random_seed = validation.optional_int(random_seed, "random_seed", low=0)
        self.tags = validation.tags(tags)
        self.base_tuning_job_name = None if base_tuning_job_name is None else \
            naming.check_base_job_name(base_tuning_job_name, "base_tuning_job_name")
        self.warm_start_config = _request_member(warm_start_config, "warm_start_config")
        self.strategy_config = _request_member(strategy_config, "strategy_config")
        self.completion_criteria_config = _request_member(completion_criteria_config,
                                                          "completion_criteria_config")
        self.latest_tuning_job: TuningJob | None = None
        self._check_rules()
        if self.sagemaker_session.backend is backends.LOCAL:  # SageMaker runs its own
            strategies.require_engine(self.strategy)

    # ------------------------------------------------------------------ the request

    def hyperparameter_ranges(self) -> dict[str, list[dict[str, Any]]]:
        """The ParameterRanges member, as v2's method of that name returns it."""
        return parameters.parameter_ranges_member(self._hyperparameter_ranges)

    def _config(self) -> TuningConfig:
        return TuningConfig(
            strategy=self.strategy, objective_type=self.objective_type,
            objective_metric_name=self.objective_metric_name or "",
            parameter_ranges=self.hyperparameter_ranges(),
            max_parallel_jobs=self.max_parallel_jobs, max_jobs=self.max_jobs,
            max_runtime_in_seconds=self.max_runtime_in_seconds,
            early_stopping_type=self.early_stopping_type, random_seed=self.random_seed,
            strategy_config=self.strategy_config,
            completion_criteria=self.completion_criteria_config,
            metric_definitions=None if self.metric_definitions is None
            else tuple(self.metric_definitions),
            warm_start=self.warm_start_config, tags=tuple(self.tags))

    def _check_rules(self) -> None:
        """AWS's rules on what the estimator alone decides (its metric definitions and user
        hyperparameters), before any plan: the same rules `fit` applies to the whole request."""
        sketch = {"AlgorithmSpecification": {"TrainingImage": "-",
                                             "MetricDefinitions": self.estimator.metric_definitions
                                             or []},
                  "HyperParameters": self.estimator.hyperparameters()}
        config = self._config()
        try:
            rules.check_request({"HyperParameterTuningJobName": "sketch",
                                 rules.CONFIG: config.member(),
                                 rules.DEFINITION: training_job_definition(sketch, config)})
        except rules.RuleBroken as error:
            raise _argument_error(error) from None

    def _job_name(self, job_name: str | None) -> str:
        if job_name is not None:
            try:
                return rules.check_name(job_name, "HyperParameterTuningJobName")
            except rules.RuleBroken as error:
                raise _argument_error(error) from None
        base = self.base_tuning_job_name or naming.base_name_from_image(
            self.estimator.training_image_uri())
        return tuning_name_from_base(base)

    def _prepare(self, inputs: inputs_module.Inputs, job_name: str | None
                 ) -> tuple[dict[str, Any], Any, list[str]]:
        """The checked request, what stores the code and inputs (run after the name is
        reserved), and the members its trials lose against the plain training job (each line
        logged here, with what the request shows alone)."""
        name = self._job_name(job_name)
        planned, stage = planner.prepare(self.estimator.definition(inputs, name),
                                         self.sagemaker_session)
        try:
            request = validate_tuning_request(tuning_request(name, planned.request,
                                                             self._config()))
        except rules.RuleBroken as error:
            raise _argument_error(error) from None
        lost = parity.lost_members(planned.request, request[rules.DEFINITION],
                                   tuned_names(request[_CONFIG]["ParameterRanges"]))
        for line in lost + parity.request_warnings(request):
            logger.warning("%s", line)
        return dict(request), stage, lost

    def tuning_job_request(self, inputs: inputs_module.Inputs = None,
                           job_name: str | None = None) -> dict[str, Any]:
        """The dry run: the CreateHyperParameterTuningJob request `fit` would send, checked.
        Nothing is packed, uploaded or sent."""
        return self._prepare(inputs, job_name)[0]

    # ------------------------------------------------------------------ running

    def fit(self, inputs: inputs_module.Inputs = None, job_name: str | None = None,
            wait: bool = True, **kwargs: Any) -> None:
        """Upload the code and local inputs as `estimator.fit` does, then start the tuning job
        and, with `wait`, poll until it ends (TuningJobFailedError when it fails).
        `include_cls_metadata` (v2) is accepted and ignored."""
        kwargs.pop("include_cls_metadata", None)
        if kwargs:
            raise UserInputError(f"fit got unexpected arguments {sorted(kwargs)}")
        request, stage, lost = self._prepare(inputs, job_name)
        name = request["HyperParameterTuningJobName"]
        self.sagemaker_session.submit_tuning_job(request, stage, lost)
        self.latest_tuning_job = TuningJob(self.sagemaker_session, name)
        print(f"Started hyperparameter tuning job {name}", flush=True)
        if wait:
            self.latest_tuning_job.wait()

    @property
    def sagemaker_session(self) -> BaseSession:
        """The estimator's session, which runs the tuning job (v2's property)."""
        return self.estimator.session

    def _latest(self) -> TuningJob:
        if self.latest_tuning_job is None:
            raise UserInputError("No tuning job available: call fit() or attach() first")
        return self.latest_tuning_job

    def describe(self) -> dict[str, Any]:
        """The DescribeHyperParameterTuningJob response of the latest tuning job."""
        return self._latest().describe()

    def stop_tuning_job(self) -> None:
        """Stop the latest tuning job and its running training jobs."""
        self._latest().stop()

    def wait(self) -> dict[str, Any]:
        """Poll the latest tuning job until it ends."""
        return self._latest().wait()

    def best_training_job(self) -> str:
        """The name of the latest tuning job's best training job."""
        return self._latest().best_training_job()

    def best_estimator(self, best_training_job: Mapping[str, Any] | None = None) -> Estimator:
        """The best training job attached to an estimator of the tuner's estimator's class (v2's
        method; `best_training_job`: a dict with its `TrainingJobName`, default the latest
        tuning job's best). Its `checkpoints()` and `download_checkpoint()` read that trial's
        own checkpoints among those the trials share (`tuning.trial_checkpoints`)."""
        name = best_training_job["TrainingJobName"] if best_training_job is not None \
            else self.best_training_job()
        estimator = type(self.estimator).attach(name, session=self.sagemaker_session,
                                                wait=False)
        if estimator.checkpoint_s3_uri:
            estimator.trial_checkpoints = TrialCheckpoints.of(
                estimator.checkpoint_s3_uri, name,
                self.sagemaker_session.tuning_job_trials(self._latest().name))
        return estimator

    def analytics(self) -> HyperparameterTuningJobAnalytics:
        """The latest tuning job's `HyperparameterTuningJobAnalytics` (v2's): its `dataframe()`
        holds one row per trial."""
        return HyperparameterTuningJobAnalytics(self._latest().name, self.sagemaker_session)

    @classmethod
    def attach(cls, tuning_job_name: str, sagemaker_session: Any = None,
               job_details: Mapping[str, Any] | None = None,
               estimator_cls: type[Estimator] | None = None) -> HyperparameterTuner:
        """A tuner for an existing tuning job: its estimator rebuilt from the job's
        TrainingJobDefinition (`estimator_cls`, default PyTorch), its ranges and settings
        from the description. The session defaults to a SageMaker `Session`."""
        from ddpjob.tuning.attach import tuner_arguments

        session = sagemaker_session or backends.SAGEMAKER.session_type()()
        described = dict(job_details or session.describe_tuning_job(tuning_job_name))
        tuner = cls(**tuner_arguments(described, session, estimator_cls))
        tuner.latest_tuning_job = TuningJob(session, tuning_job_name)
        return tuner


def tuning_name_from_base(base: str, now: float | None = None) -> str:
    """`<base>-<yymmdd-HHMMSS>-<4 hex>` in at most 32 characters (ours: v2's short timestamp
    has minute resolution, so two tuners started in one minute would collide)."""
    tail = f"-{time.strftime('%y%m%d-%H%M%S', time.gmtime(now))}-{secrets.token_hex(2)}"
    return base[: rules.MAX_NAME - len(tail)].rstrip("-") + tail
