"""No import cycle in the product, the tools or the benchmarks (static).

Type-only and function-level imports count too: a cycle hidden inside a function is still two
modules that cannot be understood apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

import bench
import pytest

import serenity_allocator
import serenity_tools

PACKAGES = {
    package.__name__: Path(str(package.__file__)).parent
    for package in (serenity_allocator, serenity_tools, bench)
}


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> dict[str, Path]:
    root = PACKAGES[package]
    return {_module_name(package, root, path): path for path in root.rglob("*.py")}


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
            module = [node.module] if node.module else []  # None in ``from . import x``
            target = ".".join([*base, *module] if node.level else module)
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


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_the_package_has_no_import_cycle(package: str) -> None:
    # Given every module of the package and everything it imports of it (TYPE_CHECKING
    # blocks and imports inside functions too) / Then no module reaches itself
    modules = _modules(package)
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    assert sum(len(edges) for edges in graph.values()) > 30  # the walk really saw imports
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_type_only_cycle() -> None:
    # Given two modules that import each other / Then the finder reports them as one cycle
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
