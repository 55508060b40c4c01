"""Every relative link of the README and the docs points at a file that exists, and every
`#anchor` into a Markdown page at one of its headings (as GitHub names them)."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md",
                ROOT / "notebooks" / "README.md", ROOT / "container" / "README.md",
                *(ROOT / "docs").glob("*.md")])
PARSER = MarkdownIt("commonmark").enable("table")


def _links(page: Path) -> list[str]:
    """The targets of the page's links and images; code spans and blocks hold none."""
    targets = []
    for token in PARSER.parse(page.read_text()):
        for child in token.children or ():
            if child.type == "link_open":
                targets.append(str(child.attrs["href"]))
            elif child.type == "image":
                targets.append(str(child.attrs["src"]))
    return targets


def _slug(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@cache
def _anchors(page: Path) -> frozenset[str]:
    tokens = PARSER.parse(page.read_text())
    seen: Counter[str] = Counter()
    anchors = set()
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        slug = _slug("".join(c.content for c in inline.children or ()
                             if c.type in ("text", "code_inline")))
        anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return frozenset(anchors)


def _broken(page: Path) -> list[str]:
    broken = []
    for target in _links(page):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue  # an address on the web, not checked here
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif parts.fragment and path.suffix == ".md" and parts.fragment not in _anchors(path):
            broken.append(f"{target}: no heading #{parts.fragment} in {path.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert _broken(page) == []


def test_a_missing_file_and_a_missing_heading_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Limits (local)\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#limits-local) [gone](nowhere.md) [no](other.md#limits)\n"
                    "`[code](not-a-link.md)` [web](https://example.com/x.md)\n")
    assert _broken(page) == ["nowhere.md: no such file",
                             "other.md#limits: no heading #limits in other.md"]
