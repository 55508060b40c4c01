"""The CreateTrainingJob request, checked by botocore (`planner.plan` builds it).

`validate_request` checks a request against botocore's SageMaker service model, the same check a
boto3 client makes before sending, and turns a failure into one line.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ddpjob.errors import UserInputError

if TYPE_CHECKING:  # pragma: no cover
    from botocore.model import ServiceModel

OPERATION = "CreateTrainingJob"


@functools.lru_cache(maxsize=1)
def service_model() -> ServiceModel:
    """botocore's SageMaker service model (loaded once per process: it is large)."""
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def validate_request(request: Mapping[str, Any], operation: str = OPERATION) -> Mapping[str, Any]:
    """Return `request` when botocore's model accepts it as `operation`'s input; else one-line
    UserInputError."""
    from botocore.validate import ParamValidator

    shape = service_model().operation_model(operation).input_shape
    report = ParamValidator().validate(dict(request), shape)
    if report.has_errors():
        lines = [line.strip() for line in report.generate_report().splitlines()]
        problems = "; ".join(line for line in lines if line and not line.endswith(":"))
        raise UserInputError(f"invalid {operation} request, nothing was sent: {problems}")
    return request
