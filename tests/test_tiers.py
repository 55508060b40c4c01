"""The tiers' rules of tests/conftest.py that decide without running a test: folders, and
which `-m` expressions let a folder go uncollected."""

from __future__ import annotations

import pytest

from tests.conftest import TESTS, folder_tier, selects


@pytest.mark.parametrize(("path", "tier"), [
    ("interop/test_corpus.py", "interop"),
    ("sdk3/test_registry.py", "interop"),
    ("dlc", "interop"),
    ("test_notebook.py", "interop"),
    ("e2e/test_s3_jobs.py", "jobs"),
    ("local/test_jobs.py", None),  # decided test by test, by what each uses
    ("runtime/test_restart_coordination.py", None),
])
def test_a_folder_decides_the_tier_of_what_it_holds(path: str, tier: str | None) -> None:
    assert folder_tier(TESTS / path) == tier


@pytest.mark.parametrize(("markexpr", "tier", "selected"), [
    ("unit", "interop", False),
    ("unit", "jobs", False),
    ("unit or integration", "jobs", False),
    ("not interop", "jobs", True),
    ("not interop", "interop", False),
    ("(unit or interop) and not jobs", "interop", True),
    ("", "interop", True),  # no -m: everything
    ("not slow", "interop", True),  # a name other than a tier: the tests decide, not the folder
    ("unit and not slow", "jobs", True),
    ("unit or", "jobs", True),  # a bad expression: collected, and pytest says what is wrong
])
def test_only_an_expression_of_tier_names_leaves_a_folder_uncollected(
    markexpr: str, tier: str, selected: bool,
) -> None:
    assert selects(markexpr, tier) is selected
