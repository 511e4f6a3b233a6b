"""The layering contract ([tool.importlinter] in pyproject.toml) holds, and it can fail.

`make layers` runs the contract on the real tree. These tests run the same command on a copy of
the package, once as it is and once with the import a careless change would add, so a contract
that no longer sees the arrows it names fails here instead of passing forever.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infrastructure._template import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
DOMAIN_MODULE = Path("serenity_allocator/domain/transfer.py")


def _copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "src" / "serenity_allocator",
        tmp_path / "src" / "serenity_allocator",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _add_import(tree: Path, module: Path, line: str) -> None:
    path = tree / "src" / module
    source = path.read_text(encoding="utf-8")
    head = "from __future__ import annotations\n"
    assert head in source, f"{module} has no __future__ import to anchor the new line"
    path.write_text(source.replace(head, f"{head}\n{line}  # noqa: F401\n", 1), "utf-8")


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # The copy comes first on the path: it shadows the editable install of the real tree.
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_layers_the_tree_as_it_is_keeps_every_contract(tmp_path: Path) -> None:
    # Given a copy of the package as committed
    tree = _copy_of_the_package(tmp_path)

    # When the contract runs
    result = _lint_imports(tree)

    # Then every contract is kept
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("line", "forbidden"),
    [
        ("import boto3", "boto3"),
        ("import httpx", "httpx"),
        ("from ..adapters import aws_clients", "serenity_allocator.adapters"),
        ("from ..application import deadlines", "serenity_allocator.application"),
    ],
)
def test_layers_a_domain_module_that_imports_the_outside_breaks_the_contract(
    tmp_path: Path, line: str, forbidden: str
) -> None:
    # Given a copy whose domain module imports what the domain must never import
    tree = _copy_of_the_package(tmp_path)
    _add_import(tree, DOMAIN_MODULE, line)

    # When the contract runs
    result = _lint_imports(tree)

    # Then it fails, naming the domain's contract and the forbidden import
    assert result.returncode == 1, result.stdout + result.stderr
    assert "The domain is pure" in result.stdout
    assert f"serenity_allocator.domain is not allowed to import {forbidden}" in " ".join(
        result.stdout.split()
    )


def test_layers_an_adapter_that_calls_a_use_case_breaks_the_contract(tmp_path: Path) -> None:
    # Given a copy whose adapter imports a use case
    tree = _copy_of_the_package(tmp_path)
    adapter = Path("serenity_allocator/adapters/sqs.py")
    _add_import(tree, adapter, "from .. import application")

    # When the contract runs
    result = _lint_imports(tree)

    # Then the adapters' contract is broken
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Adapters implement ports" in result.stdout
