"""Job names: the official SDK's format, SageMaker's pattern and length."""

from __future__ import annotations

import re
import time

import pytest
from ddpjob import naming
from ddpjob.errors import UserInputError


def test_name_from_base_has_official_timestamp_format() -> None:
    moment = time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, 0)) - time.timezone + 0.9876
    assert re.fullmatch(r"train-2026-03-04-05-06-07-987-[0-9a-f]{6}",
                        naming.name_from_base("train", now=moment))


def test_names_made_in_the_same_millisecond_differ() -> None:
    """Two processes submitting at the same moment must not get the same job name."""
    names = {naming.name_from_base("train", now=1_700_000_000.5) for _ in range(100)}
    assert len(names) == 100


def test_long_base_is_trimmed_to_63_characters() -> None:
    name = naming.name_from_base("b" * 100)
    assert len(name) == 63
    assert re.fullmatch(r"b{32}-\d{4}(-\d\d){5}-\d{3}-[0-9a-f]{6}", name)
    assert naming.check_job_name(name) == name


def test_base_name_from_image() -> None:
    assert naming.base_name_from_image("1234.dkr.ecr.us-east-1.amazonaws.com/ddpjob:cuda") == \
        "ddpjob"
    assert naming.base_name_from_image("ddpjob") == "ddpjob"


@pytest.mark.parametrize("bad", ["", "-lead", "trail-", "under_score", "a" * 64, "sp ace", 7])
def test_bad_job_names(bad: object) -> None:
    with pytest.raises(UserInputError, match="job_name"):
        naming.check_job_name(bad)
