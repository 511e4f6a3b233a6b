"""No import cycle in the product, type-only and function-level imports included (static)."""

from __future__ import annotations

import ast
from pathlib import Path

import serenity_allocator

ROOT = Path(serenity_allocator.__file__).parent
PACKAGE = "serenity_allocator"


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in ROOT.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every product module ``name`` imports, wherever the import statement sits."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
            target = ".".join([*base, node.module] if node.level else [node.module or ""])
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return {module for module in found if module in known and module != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_product_has_no_import_cycle() -> None:
    # Given every module of src/serenity_allocator and everything it imports (TYPE_CHECKING
    # blocks and imports inside functions too) / Then no module reaches itself
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    assert sum(len(edges) for edges in graph.values()) > 100  # the walk really saw imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_type_only_cycle() -> None:
    # Given two modules that import each other / Then the finder reports them as one cycle
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
