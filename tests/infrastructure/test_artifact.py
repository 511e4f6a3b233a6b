"""The Lambda artifact holds the product only: no tool, test or benchmark module lands in it."""

from __future__ import annotations

import ast
from pathlib import Path

from serenity_tools.operator.build import PROJECT_ROOT, copy_code_uri, tool_files_in
from tests.infrastructure._template import load_template

SRC = PROJECT_ROOT / "src"


def test_artifact_functions_ship_code_uri_src_only() -> None:
    # Given the template / Then every function's code is src/ (the tools live in tools/)
    template = load_template()
    code_uris = {
        name: resource["Properties"].get("CodeUri")
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    assert code_uris == {"AllocatorFunction": "src/", "SweepFunction": "src/"}


def test_artifact_staged_like_sam_build_holds_no_tool_module(tmp_path: Path) -> None:
    # Given CodeUri copied the way sam build copies it
    copy_code_uri(tmp_path)

    # Then the product is there and nothing of the tools, tests or benchmarks is
    assert (tmp_path / "serenity_allocator" / "handlers" / "allocator.py").is_file()
    assert tool_files_in(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requirements.txt", "serenity_allocator"]


def test_artifact_check_finds_a_tool_module_that_lands_in_it(tmp_path: Path) -> None:
    # Given a staged artifact into which a tool module slipped
    copy_code_uri(tmp_path)
    stray = tmp_path / "serenity_tools" / "standins" / "simulator.py"
    stray.parent.mkdir(parents=True)
    stray.write_text("ROUTES = {}\n")

    # When it is checked / Then the stray module is named
    assert tool_files_in(tmp_path) == ["serenity_tools/standins/simulator.py"]


def test_artifact_product_never_imports_a_tool_package() -> None:
    # Given every module of the product
    offenders = []
    for source in sorted(SRC.rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{source.relative_to(PROJECT_ROOT)}: {name}"
                for name in names
                if name.split(".")[0] in ("serenity_tools", "tests", "bench", "yaml", "moto")
            ]

    # Then none imports the tools, the tests, the benchmarks or the local-only libraries
    assert offenders == []
