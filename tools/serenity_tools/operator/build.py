"""``serenity-allocator build``: the deployable zip, the way ``sam build`` lays it out.

Copies ``src/`` and installs ``src/requirements.txt`` for the Lambda platform (python3.12,
arm64 by default) next to it, leaves out what the Lambda runtime already provides (boto3 and
its dependencies), and zips the result. Used by ``make build`` when the SAM CLI is not
installed, and by the benchmarks for the artifact's size.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")
TOOL_PACKAGES = ("serenity_tools", "serenity_allocator/local", "tests", "bench")
"""Paths that must never be in the artifact: the tools, the former in-product tool folder,
the tests and the benchmarks."""


@dataclass(frozen=True)
class BuildResult:
    """Where the artifact is and how big it is, unzipped, per top-level package."""

    zip_path: Path
    unzipped_bytes: int
    by_package: dict[str, int]


def _tree_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def pip_install_for_lambda(
    target: Path,
    sources: list[str],
    *,
    platform: str = "manylinux2014_aarch64",
    python_version: str = "3.12",
    timeout_s: float = 300.0,
) -> None:
    """``pip install`` wheels for the Lambda platform into ``target`` (no bytecode compiled).

    Raises:
        subprocess.CalledProcessError: pip could not resolve for that platform.
        subprocess.TimeoutExpired: pip took longer than ``timeout_s``.
    """
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(target),
            "--platform",
            platform,
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *sources,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def stage_artifact(
    stage: Path,
    *,
    platform: str = "manylinux2014_aarch64",
    python_version: str = "3.12",
    requirements: Path = PROJECT_ROOT / "src" / "requirements.txt",
) -> dict[str, int]:
    """Lay the artifact out in ``stage`` as ``sam build`` does for ``CodeUri: src/``.

    ``src/`` is copied as is and ``src/requirements.txt`` installed next to it for the Lambda
    platform (wheels' files, no bytecode compiled at install); what the runtime provides is
    removed. Returns the unzipped size per top-level entry.

    Raises:
        subprocess.CalledProcessError: pip could not resolve for that platform.
    """
    stage.mkdir(parents=True, exist_ok=True)
    pip_install_for_lambda(
        stage, ["-r", str(requirements)], platform=platform, python_version=python_version
    )
    for name in RUNTIME_PROVIDED:
        for path in stage.glob(f"{name}*"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    copy_code_uri(stage)
    return {p.name: _tree_size(p) for p in sorted(stage.iterdir())}


def copy_code_uri(stage: Path, code_uri: Path = PROJECT_ROOT / "src") -> None:
    """Copy the functions' ``CodeUri`` into ``stage`` as ``sam build`` does (no caches)."""
    shutil.copytree(
        code_uri,
        stage,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )


def tool_files_in(stage: Path) -> list[str]:
    """Every file of a tool package (:data:`TOOL_PACKAGES`) found in a staged artifact."""
    return sorted(
        str(file.relative_to(stage))
        for package in TOOL_PACKAGES
        if (stage / package).exists()
        for file in (stage / package).rglob("*")
        if file.is_file()
    )


def build_artifact(
    output: Path, *, platform: str = "manylinux2014_aarch64", python_version: str = "3.12"
) -> BuildResult:
    """Stage the artifact and zip it at ``output``."""
    with tempfile.TemporaryDirectory(prefix="serenity-build-") as tmp:
        stage = Path(tmp) / "package"
        sizes = stage_artifact(stage, platform=platform, python_version=python_version)
        output.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(stage.rglob("*")):
                if file.is_file():
                    archive.write(file, file.relative_to(stage))
        return BuildResult(output, _tree_size(stage), sizes)


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the build options."""
    parser.add_argument("--output", type=Path, default=PROJECT_ROOT / "build" / "allocator.zip")
    parser.add_argument("--platform", default="manylinux2014_aarch64")
    parser.add_argument("--python-version", default="3.12")


def run(args: argparse.Namespace) -> int:
    """Build and print the artifact's size by package."""
    result = build_artifact(args.output, platform=args.platform, python_version=args.python_version)
    for name, size in sorted(result.by_package.items(), key=lambda kv: -kv[1]):
        print(f"{size / 1e6:8.2f} MB  {name}")
    print(f"{result.unzipped_bytes / 1e6:8.2f} MB  unzipped total -> {result.zip_path}")
    return 0
