"""At most 5 parameters per function in src/ (the house rule; issue 35, "Values, not bags").

Counted: every positional-only, positional and keyword-only parameter, ``*args`` and
``**kwargs`` one each; a method's ``self`` or a classmethod's ``cls`` is not. Options grouped in
one value (a frozen dataclass, or one ``**options: Unpack[...]``) count as one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from serenity_tools.operator.build import PROJECT_ROOT

SRC = PROJECT_ROOT / "src"
MAX_PARAMETERS = 5


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The parameters ``function`` counts under the house rule."""
    args = function.args
    named = [a.arg for a in (*args.posonlyargs, *args.args)]
    if named and named[0] in ("self", "cls"):
        named = named[1:]
    return (
        len(named)
        + len(args.kwonlyargs)
        + (1 if args.vararg is not None else 0)
        + (1 if args.kwarg is not None else 0)
    )


def wide_functions(source: str, label: str) -> list[str]:
    """``label:line:name (count)`` of every function in ``source`` with too many parameters."""
    wide = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and parameter_count(node) > MAX_PARAMETERS
    ]
    return [
        f"{label}:{node.lineno}:{node.name} ({parameter_count(node)})"
        for node in sorted(wide, key=lambda node: node.lineno)
    ]


def wide_functions_under(root: Path) -> list[str]:
    """Every function under ``root`` with more than :data:`MAX_PARAMETERS` parameters."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        found += wide_functions(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    return found


def test_no_function_in_src_takes_more_than_five_parameters() -> None:
    # Given every module of the product / Then none has a function wider than 5 parameters
    assert wide_functions_under(SRC) == []


def test_the_walk_names_every_function_wider_than_five_and_only_those() -> None:
    # Given a module with one function of each shape the rule counts
    source = """
def six(a, b, c, d, e, f): ...
def five(a, b, c, d, e): ...
def star(a, b, c, d, *args, **kwargs): ...
def keywords(a, /, b, *, c, d, e, f): ...
class Store:
    def method(self, a, b, c, d, e): ...
    def wide(self, a, b, c, d, e, f): ...
    @classmethod
    def build(cls, a, b, c, d, e): ...
async def fetch(a, b, c, d, e, *, f=None): ...
def outer():
    def inner(a, b, c, d, e, f): ...
"""

    # When walked / Then exactly the functions with 6 counted parameters are named, with lines
    assert wide_functions(source, "m.py") == [
        "m.py:2:six (6)",
        "m.py:4:star (6)",
        "m.py:5:keywords (6)",
        "m.py:8:wide (6)",
        "m.py:11:fetch (6)",
        "m.py:13:inner (6)",
    ]


def test_the_walk_over_a_tree_reports_a_wide_function_by_file(tmp_path: Path) -> None:
    # Given a package with one offender in a nested module and one clean module
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "clean.py").write_text("def ok(a, b): ...\n", encoding="utf-8")
    (tmp_path / "pkg" / "bag.py").write_text(
        "\n\ndef bag(a, b, c, d, e, f, g): ...\n", encoding="utf-8"
    )

    # When walked / Then the offender is named with its file, line and count
    assert wide_functions_under(tmp_path) == ["pkg/bag.py:3:bag (7)"]
