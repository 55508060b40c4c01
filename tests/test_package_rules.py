"""The package rules of docs/architecture.md, read from the source's import statements.

What the client may import, what ships to SageMaker, which part of the runtime may use which,
that the local backend never reaches into the SageMaker one, and that no two modules import
each other, and that the local backend's rooms stand on one another in one order.
Every `import` counts, also inside functions, except under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The local kit's stand-ins for SageMaker-only libraries: a folder on local workers' path (not
#: a package of the runtime), so its modules are named as the workers import them.
STAND_INS = ROOT / "runtime" / "ddpjob_runtime" / "localkit" / "standins"
SOURCES = (STAND_INS, ROOT / "sdk", ROOT / "runtime")  # the innermost first
RUNTIME = "ddpjob_runtime"
STAND_IN_PACKAGES = {"smdistributed"}

# The runtime's parts and what each may import of the runtime (and whether torch).
RUNTIME_PARTS = {
    "shared": {"shared"},  # the torch-free layer the client and every host share
    "platform": {"shared", "platform"},  # SageMaker's duties around the script (local hosts too)
    "localkit": {"shared", "localkit"},  # the local hosts' template; never shipped
    "job": {"shared", "platform", "job", "checkpoints"},  # in the job's processes, with torch
    "checkpoints": {"shared", "platform"},  # user API
    "dataparallel": {"dataparallel"},  # user API (smdistributed.dataparallel's)
}
TORCH_FREE_PARTS = {"shared", "platform", "localkit"}
CLIENT_MAY_IMPORT = {"shared"}  # ddpjob, outside the local backend
LOCAL_BACKEND_MAY_IMPORT = {"shared", "platform"}  # ddpjob.local: it also acts as the platform
# The local backend's rooms, top floor first: a room imports only rooms on the floors below it
# (and itself); rooms on one floor never import each other. docs/architecture.md draws it.
LOCAL_FLOORS = (
    {"session"},  # LocalSession, the entry
    {"aws"},  # what the official SDK's session and boto3-shaped code are answered with
    {"tuning"},  # tuning jobs: their controller, whose trials are training jobs
    {"control"},  # the training-job API: checks, admission, answers
    {"run"},  # one job running: supervisor, hosts, staging
    {"watch"},  # what a job is watched by: logs, metrics, the ranks' stacks (of pools' too)
    {"hostkinds", "warmpools"},  # what a host runs; warm pools
    {"isolation"},  # namespaces, host roots, GPU shares, the fixed port
    {"base"},  # the ground floor: job store and states, process tree, templates, spot rules
)


def _module_name(path: Path) -> str:
    base = next(src for src in SOURCES if src in path.parents)
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for src in SOURCES for path in src.rglob("*.py")
            if "__pycache__" not in path.parts}


MODULES = _modules()


def _imports(tree: ast.AST) -> Iterator[str]:
    """The module names the statements import (`from a import b` names `a.b` when it is one)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                joined = f"{node.module}.{alias.name}"
                yield joined if joined in MODULES else node.module
        else:
            yield from _imports(node)


@functools.cache
def imports_of(module: str) -> frozenset[str]:
    return frozenset(_imports(ast.parse(MODULES[module].read_text())))


def _part(module: str) -> str | None:
    """`shared`, `platform`, ... for a runtime module, None elsewhere."""
    parts = module.split(".")
    return parts[1] if parts[0] == RUNTIME and len(parts) > 1 else None


def _runtime_parts_imported(module: str) -> set[str]:
    return {_part(name) for name in imports_of(module) if name.split(".")[0] == RUNTIME}


def _violations(modules: list[str], allowed: set[str]) -> list[str]:
    return [f"{module} imports ddpjob_runtime.{part}" for module in modules
            for part in sorted(_runtime_parts_imported(module) - allowed)]


def test_the_runtime_has_only_its_parts_and_user_api_at_the_top() -> None:
    tops = {_part(name) for name in MODULES if _part(name)}
    assert tops == set(RUNTIME_PARTS), tops
    assert all(_part(name) or name == RUNTIME for name in MODULES if name.startswith(RUNTIME))


@pytest.mark.parametrize("part", sorted(RUNTIME_PARTS))
def test_each_runtime_part_imports_only_what_it_may(part: str) -> None:
    modules = [name for name in MODULES if _part(name) == part]
    assert modules
    assert _violations(modules, RUNTIME_PARTS[part]) == []
    assert not [name for name in modules for imported in imports_of(name)
                if imported.split(".")[0] == "ddpjob"], "the runtime never imports the client"
    if part in TORCH_FREE_PARTS:
        assert not [f"{name} imports {imported}" for name in modules
                    for imported in imports_of(name) if imported.split(".")[0] == "torch"]


def test_what_ships_to_sagemaker_never_imports_the_local_kit() -> None:
    shipped = [name for name in MODULES if name.startswith(RUNTIME) and _part(name) != "localkit"]
    assert [name for name in shipped if "localkit" in _runtime_parts_imported(name)] == []


def test_the_stand_ins_use_the_dataparallel_library_only_and_nothing_imports_them() -> None:
    stand_ins = [name for name in MODULES if name.split(".")[0] in STAND_IN_PACKAGES]
    assert {name.split(".")[0] for name in stand_ins} == STAND_IN_PACKAGES
    assert _violations(stand_ins, {"dataparallel"}) == []
    assert [f"{name} imports {imported}" for name in MODULES if name not in stand_ins
            for imported in imports_of(name)
            if imported.split(".")[0] in STAND_IN_PACKAGES] == []


def test_the_client_imports_the_shared_layer_only() -> None:
    client = [name for name in MODULES
              if name.startswith("ddpjob.") and not name.startswith("ddpjob.local")]
    local = [name for name in MODULES if name.startswith("ddpjob.local")]
    assert _violations(client, CLIENT_MAY_IMPORT) == []
    assert _violations(local, LOCAL_BACKEND_MAY_IMPORT) == []


def test_the_local_backend_never_imports_the_sagemaker_backend() -> None:
    local = [name for name in MODULES if name.startswith("ddpjob.local")]
    assert [f"{name} imports {imported}" for name in local for imported in imports_of(name)
            if imported.startswith("ddpjob.sagemaker")] == []


def _room(module: str) -> str | None:
    """`control`, `run`, ... for a module of ddpjob.local (`session` for session.py)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["ddpjob", "local"] and len(parts) > 2 else None


def _floor_breaches(imports: dict[str, frozenset[str]]) -> list[str]:
    floor = {room: level for level, rooms in enumerate(LOCAL_FLOORS) for room in rooms}
    return [f"{name} ({_room(name)}) imports {imported}" for name, targets in imports.items()
            if _room(name) for imported in targets if _room(imported)
            and _room(imported) != _room(name) and floor[_room(imported)] <= floor[_room(name)]]


def test_the_local_rooms_stand_on_the_floors_below_them() -> None:
    local = {name: imports_of(name) for name in MODULES if _room(name)}
    assert {_room(name) for name in local} == set().union(*LOCAL_FLOORS)
    assert _floor_breaches(local) == []
    breach = {"ddpjob.local.base.proctree": frozenset({"ddpjob.local.run.hosts"}),
              "ddpjob.local.warmpools.pools": frozenset({"ddpjob.local.hostkinds.hostkind"})}
    assert len(_floor_breaches(breach)) == 2


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


def test_no_import_cycle() -> None:
    """No two modules of the client or the runtime import each other, deferred imports
    included."""
    graph = {name: {imported for imported in imports_of(name)
                    if imported in MODULES and imported != name} for name in MODULES}
    assert _cycle(graph) is None
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_a_rule_breach_is_seen() -> None:
    """The reader finds imports inside functions and `from package import module` forms."""
    tree = ast.parse("def f():\n    from ddpjob_runtime.job import launcher\n"
                     "from ddpjob_runtime import checkpoints\n"
                     "if TYPE_CHECKING:\n    import torch\n")
    assert set(_imports(tree)) == {"ddpjob_runtime.job.launcher", "ddpjob_runtime.checkpoints"}
