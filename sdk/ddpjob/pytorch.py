"""`PyTorch`: the official SDK's PyTorch estimator names; SageMaker's PyTorch container by
default on `ml.*`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ddpjob import validation
from ddpjob.errors import UserInputError
from ddpjob.estimator import DEFAULT_BASE_JOB_NAME, Estimator
from ddpjob.image_uris import PYTORCH, ImageRequest


class PyTorch(Estimator):
    """An Estimator for PyTorch scripts; on `ml.*` with no `image_uri` the job runs on
    SageMaker's PyTorch training container for `framework_version`/`py_version` (default: the
    newest of the installed official SDK's registry, `image_uris.default_versions()`) and the
    instance's processor.
    """

    _default_base_job_name = DEFAULT_BASE_JOB_NAME

    def __init__(self, entry_point: str | os.PathLike, framework_version: str | None = None,
                 py_version: str | None = None, compiler_config: object = None, **kwargs: Any):
        """See `Estimator`; `framework_version`/`py_version` are strings such as "2.3.0",
        "py311"; `compiler_config` is the official SDK's TrainingCompilerConfig."""
        self.framework_version = validation.optional_str(framework_version, "framework_version")
        self.py_version = validation.optional_str(py_version, "py_version")
        if compiler_config is not None and not callable(
            getattr(compiler_config, "_to_hyperparameter_dict", None)
        ):
            raise UserInputError("compiler_config must be the official SDK's "
                                 "TrainingCompilerConfig")
        distribution = kwargs.get("distribution")
        if compiler_config is None and isinstance(distribution, Mapping) and \
                "pytorchxla" in distribution:
            raise UserInputError("distribution 'pytorchxla' needs SageMaker Training Compiler, "
                                 "as in the official SDK: add compiler_config="
                                 "TrainingCompilerConfig()")
        self.compiler_config = compiler_config
        super().__init__(entry_point, **kwargs)

    def _image_request(self) -> ImageRequest:
        return ImageRequest(PYTORCH, self.framework_version, self.py_version,
                            self.instance_type, self.session.region_name or "",
                            distribution=self.distribution,
                            compiler_config=self.compiler_config)

    def _table_defaults(self) -> dict[str, Any]:
        # As the official PyTorch estimator: metrics time series on from PyTorch 1.3.
        if not self.instance_type.startswith("ml."):
            return {}
        if self.framework_version is None:  # on the DLC: the registry's newest, past 1.3
            return {"enable_sagemaker_metrics": True} if self.uses_dlc else {}
        version = self.framework_version.split(".")[:2]
        major_minor = tuple(int(part) for part in version if part.isdigit())
        return {"enable_sagemaker_metrics": True} if major_minor >= (1, 3) else {}

    def _framework_hyperparameters(self) -> dict[str, Any]:
        if not self.compiler_config:
            return {}
        return dict(self.compiler_config._to_hyperparameter_dict())
