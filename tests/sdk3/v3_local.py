"""What the scripts the v3 tests run in the SDK v3 venv (`official_trainer.py`,
`official_tuner.py`; this folder is their `sys.path[0]`) share: a LocalSession's official
session and SageMaker's PyTorch training image, as a v3 notebook names them."""

from __future__ import annotations

from typing import Any


def session_and_image(home: str) -> tuple[Any, str]:
    """`LocalSession(home).official_session()` and the PyTorch 2.5 CPU training image's URI."""
    from ddpjob.local.session import LocalSession
    from sagemaker.core import image_uris

    session = LocalSession(home).official_session()
    image = image_uris.retrieve("pytorch", region=session.boto_region_name, version="2.5",
                                py_version="py311", instance_type="ml.m5.xlarge",
                                image_scope="training")
    return session, image
