"""`HuggingFace`: the official SDK's Hugging Face estimator names, for DDP jobs.

On `ml.*` with no `image_uri` the job runs on SageMaker's Hugging Face training container for
`transformers_version` and `pytorch_version`; locally the same script runs on the ddpjob
runtime installed here, like `PyTorch`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ddpjob import validation
from ddpjob.errors import UserInputError
from ddpjob.estimator import Estimator
from ddpjob.image_uris import HUGGINGFACE, ImageRequest


class HuggingFace(Estimator):
    """An Estimator for Hugging Face (transformers on PyTorch) scripts."""

    _default_base_job_name = "huggingface-pytorch-training"

    def __init__(self, py_version: str | None = None, entry_point: str | os.PathLike = "",
                 transformers_version: str | None = None, pytorch_version: str | None = None,
                 tensorflow_version: str | None = None, compiler_config: object = None,
                 **kwargs: Any):
        """See `Estimator`; versions as in `sagemaker.huggingface.HuggingFace` (e.g.
        transformers_version="4.49.0", pytorch_version="2.5.1", py_version="py311")."""
        if tensorflow_version is not None:
            raise UserInputError("tensorflow_version: ddpjob runs PyTorch jobs; use "
                                 "pytorch_version")
        distribution = kwargs.get("distribution")
        if compiler_config is not None or (isinstance(distribution, Mapping)
                                           and "pytorchxla" in distribution):
            raise UserInputError("compiler_config and distribution 'pytorchxla' (SageMaker "
                                 "Training Compiler) are not supported by ddpjob.HuggingFace")
        self.py_version = validation.optional_str(py_version, "py_version")
        self.transformers_version = validation.optional_str(transformers_version,
                                                            "transformers_version")
        self.pytorch_version = validation.optional_str(pytorch_version, "pytorch_version")
        super().__init__(entry_point, **kwargs)
        if self.image_uri is None and self.instance_type.startswith("ml.") and not (
            self.transformers_version and self.pytorch_version
        ):
            raise UserInputError("transformers_version and pytorch_version are required to "
                                 "pick SageMaker's Hugging Face container (or pass image_uri)")

    def _image_request(self) -> ImageRequest:
        return ImageRequest(HUGGINGFACE, self.transformers_version or "", self.py_version,
                            self.instance_type, self.session.region_name or "",
                            distribution=self.distribution,
                            pytorch_version=self.pytorch_version)
