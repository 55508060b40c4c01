"""No two modules of the client or the runtime import each other, deferred imports included
(imports only for type checking aside)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(packages: Path) -> dict[str, set[str]]:
    modules = {".".join(f.relative_to(packages).with_suffix("").parts).removesuffix(".__init__"): f
               for f in packages.glob("*/**/*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found = next((t for t in targets if t in modules), None)
            if found and found != name:
                graph[name].add(found)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        for target in sorted(graph[name]):
            if found := visit(target, [*path, name]):
                return found
        done.add(name)
        return None

    return next((found for name in sorted(graph) if (found := visit(name, []))), None)


@pytest.mark.parametrize("packages", ["sdk", "runtime"])
def test_no_import_cycle(packages: str) -> None:
    assert _cycle(_imports(ROOT / packages)) is None
