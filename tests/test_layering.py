"""The package edges hold to one order (docs/architecture.md): a module imports only from packages
below its own (or its own package). Every import counts, the function-level ones too (parsed with
ast, nothing is imported); an edge against the order fails unless ALLOWED names it with its
reason, and so does an entry that is no longer needed (delete it). No kvplan modules import each
other in a loop either, however deep the import sits."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"kvplan": ROOT / "kvplan", "kvplan.kernels": ROOT / "kernels"}

# Lowest first. Packages of one rank do not import each other. "shared" is kvplan's own modules
# that every layer uses (kvplan/__init__.py: the version; errors, record, units, processes, dtypes,
# atomic, early_stop; notes: the note ids and values, not their words); the entry points (_entry,
# __main__, cli_docs) rank with cli.
RANK = {
    "shared": 0,
    "anatomy": 1,
    "inputs": 2,
    "formulas": 3,
    "kernels": 3,
    "engines": 4,
    "simulate": 5,
    "measure": 5,
    "plans": 6,
    "present": 7,
    "cli": 8,
}
PACKAGE_OF_MODULE = {"_entry": "cli", "__main__": "cli", "cli_docs": "cli"}
EXTERNAL = {"model_configs", "hardware_profiles"}  # data folders (files, no code to layer)

# (importing module, imported module): edges that break the order, each with its reason. None
# is left: a new one is cut (the piece moved to the layer where it belongs), or the order itself
# changes, said why in docs/architecture.md.
ALLOWED: set[tuple[str, str]] = set()


def _module_name(path: Path, root: Path, base: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([base, *parts])


def _packages() -> set[str]:
    subs = {p.name for p in SOURCES["kvplan"].iterdir() if (p / "__init__.py").is_file()}
    return subs | {"kernels"}


def _package(module: str, packages: set[str]) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return "shared"
    if parts[1] in packages or parts[1] in EXTERNAL:
        return parts[1]
    return PACKAGE_OF_MODULE.get(parts[1], "shared")


def _type_only(tree: ast.AST) -> set[int]:
    """The nodes under `if TYPE_CHECKING:` (imports for annotations, which never run)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                inside.update(id(sub) for sub in ast.walk(statement))
    return inside


def _imports(path: Path, module: str, type_only: bool = True) -> set[str]:
    """Every kvplan module `path` imports, at any depth (`from a import b` names a.b where b is
    a module, else a); without `type_only`, not those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    skipped = set() if type_only else _type_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "kvplan" or name.startswith("kvplan.")}


def _all_modules() -> dict[str, Path]:
    modules = {}
    for base, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            modules[_module_name(path, root, base)] = path
    return modules


def _edges() -> set[tuple[str, str]]:
    """(importer, imported module) for every import of a kvplan module by another package."""
    modules = _all_modules()
    packages = _packages()
    edges = set()
    for module, path in modules.items():
        for name in _imports(path, module):
            # a name imported from a module is that module; a submodule is itself
            target = name if name in modules else name.rpartition(".")[0]
            if target not in modules:
                target = name
            if _package(module, packages) != _package(target, packages):
                edges.add((module, target))
    return edges


def _upward(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    packages = _packages()
    bad = set()
    for source, target in edges:
        low, high = _package(target, packages), _package(source, packages)
        if low in EXTERNAL:
            continue
        if RANK[low] >= RANK[high]:
            bad.add((source, target))
    return bad


def test_every_package_is_ranked():
    assert _packages() <= set(RANK), sorted(_packages() - set(RANK))


def test_imports_go_down_the_layers_only():
    upward = _upward(_edges())
    new = sorted(upward - ALLOWED)
    assert not new, "imports against the layer order (docs/architecture.md):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in new
    )


def test_the_allow_list_names_only_live_edges():
    stale = sorted(ALLOWED - _upward(_edges()))
    assert not stale, f"no longer imported, delete from ALLOWED: {stale}"


def test_the_parser_sees_function_level_imports():
    path = ROOT / "kvplan" / "inputs" / "hub.py"  # `_save` imports kvplan.atomic in its body
    assert "kvplan.atomic" in _imports(path, "kvplan.inputs.hub")


def _module_graph() -> dict[str, set[str]]:
    """Every kvplan module and the kvplan modules it imports, at module level or inside a
    function (`from a import b` is a.b where a.b is a module, else a). Imports for annotations
    alone (`if TYPE_CHECKING:`) never run and make no cycle; the layer order still holds them."""
    modules = _all_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imports(path, module, type_only=False):
            target = name if name in modules else name.rpartition(".")[0]
            if target in modules and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_no_import_cycles_among_kvplan_modules():
    """A function-level import hides a cycle from Python (it runs late) but not from a reader:
    each module's imports, at any depth, form no loop."""
    cycles = _cycles(_module_graph())
    assert not cycles, "import cycles (move the shared piece to a module both import):\n" + (
        "\n".join("  " + " <-> ".join(group) for group in cycles)
    )


def test_imports_for_annotations_alone_are_told_apart():
    path = ROOT / "kvplan" / "engines" / "request.py"  # LlamaCppRequest for a field's type
    assert "kvplan.engines.llamacpp" in _imports(path, "kvplan.engines.request")
    assert "kvplan.engines.llamacpp" not in _imports(path, "kvplan.engines.request", False)


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
