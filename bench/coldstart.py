"""Measurement 4: cold start (import time against a bare ``import boto3``) and package size.

Import time: ``python -X importtime -c "import <module>"`` in fresh processes, five runs each,
interleaved so drift on a shared machine hits every module alike; the figure is the median of
the cumulative time of the top-level import line. Two informational rows show what the first
invocation adds before its first upstream call (the imports a handler leaves to its first
invocation: the use cases, pydantic, Powertools' batch utility; then settings + runtime wiring,
which imports the HTTP client lazily) and what creating the X-Ray Tracer would cost were tracing
ever added.

Package size: the artifact built the way ``sam build`` would for the template's runtime
(python3.12, arm64): ``pip install --target DIR --platform manylinux2014_aarch64
--only-binary=:all: --python-version 3.12 --implementation cp <project>``, then the packages
the Lambda runtime already provides are removed. Falls back to the local venv's installed
files when pip cannot fetch wheels (and says so).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

from serenity_tools.operator.build import pip_install_for_lambda, stage_artifact, tool_files_in

from .common import median, note, ratio

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5
IMPORT_TARGET_X = 1.5
"""The issue's rule: importing a handler costs at most 1.5x a bare ``import boto3``."""
SIZE_TARGET_MB = 10.0

# What the python3.12 Lambda runtime already ships: boto3 and its dependency closure.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "dateutil", "six")

_ENV_ALLOCATOR = {
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "bench-token",
    "ENVIRONMENT": "bench",
    "MAX_RECEIVE_COUNT": "5",
}
_ENV_SWEEP = {**_ENV_ALLOCATOR, "SWEEP_BUCKET": "bench-bucket", "QUEUE_URL": "https://q.fifo"}

# (key, label, the module whose top-level import line is read, extra code after the import)
_CASES: tuple[tuple[str, str, str, str], ...] = (
    ("boto3", "import boto3 (baseline)", "boto3", ""),
    ("allocator", "import handlers.allocator", "serenity_allocator.handlers.allocator", ""),
    ("sweep", "import handlers.sweep", "serenity_allocator.handlers.sweep", ""),
    (
        "allocator_init",
        "handlers.allocator + get_runtime(), get_processor() (first invocation's imports, wiring)",
        "serenity_allocator.handlers.allocator",
        "serenity_allocator.handlers.allocator.get_runtime(); "
        "serenity_allocator.handlers.allocator.get_processor()",
    ),
    (
        "sweep_init",
        "handlers.sweep + get_sweep_runtime() (first invocation's imports, wiring)",
        "serenity_allocator.handlers.sweep",
        "from serenity_allocator.handlers.sweep_runtime import get_sweep_runtime; "
        "get_sweep_runtime()",
    ),
    (
        "tracer",
        "handlers.allocator + Tracer() (what X-Ray tracing would add; not wired)",
        "serenity_allocator.handlers.allocator",
        "__import__('aws_lambda_powertools').Tracer()",
    ),
)

_PROBE = """
import time, json
t0 = time.perf_counter()
import {module}
t1 = time.perf_counter()
{extra}
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "extra_s": t2 - t1}}))
"""


def _top_level_cumulative_us(stderr: str, module: str) -> int:
    """The cumulative µs of ``module``'s line at nesting level 0 in -X importtime output."""
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line.split("|")
        if len(parts) != 3:
            continue
        name = parts[2]
        if name.strip() == module and not name[1:].startswith(" "):
            return int(parts[1].strip())
    raise RuntimeError(f"no top-level importtime line for {module}")


def _direct_imports_ms(stderr: str, module: str) -> dict[str, float]:
    """Cumulative ms of each import nested directly under ``module``'s top-level line.

    -X importtime prints a module after its own imports, indented one level deeper, so the
    level-1 lines since the previous level-0 line are the target's direct imports.
    """
    children: dict[str, float] = {}
    for line in stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        name = parts[2].rstrip()
        level = (len(name) - len(name.lstrip()) - 1) // 2
        if level == 0:
            if name.strip() == module:
                return children
            children = {}
        elif level == 1:
            children[name.strip()] = int(parts[1].strip()) / 1000.0
    return {}


def _probe(module: str, extra: str, env: dict[str, str]) -> dict[str, Any]:
    code = _PROBE.format(module=module, extra=extra or "pass")
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
        cwd=tempfile.gettempdir(),  # never import from the checkout's cwd by accident
    )
    timings = json.loads(result.stdout.strip().splitlines()[-1])
    imported = {
        line.split("|")[2].strip() for line in result.stderr.splitlines() if line.count("|") == 2
    }
    return {
        "imports_httpx": "httpx" in imported,
        "direct_imports_ms": _direct_imports_ms(result.stderr, module),
        "importtime_ms": _top_level_cumulative_us(result.stderr, module) / 1000.0,
        "wall_import_ms": 1000.0 * timings["import_s"],
        "extra_ms": 1000.0 * timings["extra_s"],
    }


def _import_samples(runs: int) -> dict[str, list[dict[str, Any]]]:
    """Every case probed once per round, rounds interleaved; the warm-up round dropped."""
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("SEMRUSH_", "SERENITY_"))}
    base_env["PYTHONPATH"] = str(ROOT / "src")
    samples: dict[str, list[dict[str, Any]]] = {key: [] for key, *_ in _CASES}
    for round_no in range(runs + 1):
        for key, _label, module, extra in _CASES:
            env = {**base_env, **(_ENV_SWEEP if "sweep" in key else _ENV_ALLOCATOR)}
            sample = _probe(module, extra, env)
            if round_no:  # the first round only warms the file cache and bytecode
                samples[key].append(sample)
    return samples


def _import_row(label: str, module: str, runs_: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's medians over its rounds, with its six heaviest direct imports."""
    return {
        "label": label,
        "module": module,
        "importtime_ms": round(median([s["importtime_ms"] for s in runs_]), 1),
        "wall_import_ms": round(median([s["wall_import_ms"] for s in runs_]), 1),
        "extra_ms": round(median([s["extra_ms"] for s in runs_]), 1),
        "importtime_ms_runs": [round(s["importtime_ms"], 1) for s in runs_],
        "imports_httpx": runs_[0]["imports_httpx"],
        "heaviest_direct_imports_ms": {
            name: round(median([s["direct_imports_ms"].get(name, 0.0) for s in runs_]), 1)
            for name in sorted(
                runs_[0]["direct_imports_ms"],
                key=lambda n: runs_[0]["direct_imports_ms"][n],
                reverse=True,
            )[:6]
        },
    }


def _add_boto3_ratios(
    row: dict[str, Any], runs_: list[dict[str, Any]], boto3_ms: float, boto3_runs: list[float]
) -> None:
    row["x_boto3"] = ratio(row["importtime_ms"], boto3_ms)
    row["init_x_boto3"] = ratio(row["importtime_ms"] + row["extra_ms"], boto3_ms)
    # Each round ran every case back to back: the per-round ratio cancels slow drift.
    paired = [s["importtime_ms"] / b for s, b in zip(runs_, boto3_runs, strict=True) if b]
    row["paired_x_boto3"] = round(median(paired), 3)
    row["paired_x_boto3_runs"] = [round(x, 2) for x in paired]


def measure_imports(runs: int = RUNS) -> dict[str, Any]:
    """Median import times in fresh processes, interleaved, with the boto3 ratio."""
    samples = _import_samples(runs)
    rows: dict[str, Any] = {
        key: _import_row(label, module, samples[key]) for key, label, module, _extra in _CASES
    }
    boto3_ms = rows["boto3"]["importtime_ms"]
    boto3_runs = [s["importtime_ms"] for s in samples["boto3"]]
    for key, row in rows.items():
        _add_boto3_ratios(row, samples[key], boto3_ms, boto3_runs)
    worst = max(rows["allocator"]["x_boto3"] or 0, rows["sweep"]["x_boto3"] or 0)
    worst_paired = max(rows["allocator"]["paired_x_boto3"], rows["sweep"]["paired_x_boto3"])
    return {
        "python": sys.version.split()[0],
        "runs": runs,
        "rows": rows,
        "targets": {
            "worst_x_boto3": worst,
            "worst_paired_x_boto3": worst_paired,
            "target_x": IMPORT_TARGET_X,
            "met": worst <= IMPORT_TARGET_X,
        },
    }


# ---------------------------------------------------------------------------------------------
# Package size
# ---------------------------------------------------------------------------------------------


def _pip_build(target: Path, sources: list[str]) -> str | None:
    """Install ``sources`` for python3.12/arm64 into ``target``; None or the failure reason."""
    try:
        pip_install_for_lambda(target, sources)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        output = getattr(exc, "stderr", "") or ""
        return f"pip failed: {output.strip().splitlines()[-1] if output.strip() else exc}"
    return None


def _runtime_requirements(dist: Any) -> list[str]:
    """The distribution names a distribution requires outside its extras."""
    names = []
    for requirement in dist.requires or []:
        if "extra ==" not in requirement:
            match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
            if match:
                names.append(match.group(0))
    return names


def _copy_dist_files(dist: Any, target: Path) -> None:
    """A distribution's installed files (no bytecode, nothing outside site-packages) to target."""
    for file in dist.files or []:
        source = Path(str(file.locate()))
        if source.is_file() and "__pycache__" not in source.parts:
            destination = target / str(file)
            if str(file).startswith(".."):
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)


def _venv_copy(target: Path) -> None:
    """Fallback: the runtime dependency closure's files from this venv (host platform)."""
    from importlib import metadata

    pending, seen = ["serenity-allocator"], set()
    while pending:
        name = pending.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        pending += _runtime_requirements(dist)
        _copy_dist_files(dist, target)
    shutil.copytree(
        ROOT / "src" / "serenity_allocator",
        target / "serenity_allocator",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )


_GROUP_ALIASES = {
    "pyyaml": "yaml",
    "_yaml": "yaml",
    "python_dateutil": "dateutil",
    "__pycache__": "(other)",
    "bin": "(other)",
    "requirements.txt": "(other)",
}


def _top_level_of(entry: Path) -> str:
    """Group ``foo-1.0.dist-info`` with ``foo``; modules and packages by their own name."""
    name = entry.name
    if name.endswith((".dist-info", ".egg-info")):
        name = name.split("-")[0].lower()
    name = name.removesuffix(".py")
    return _GROUP_ALIASES.get(name, name)


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _zip_bytes(root: Path, scratch: Path) -> int:
    archive = scratch / "artifact.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for file in sorted(root.rglob("*")):
            if file.is_file():
                handle.write(file, file.relative_to(root))
    return archive.stat().st_size


def _product_modules_importing_yaml() -> list[str]:
    """Modules of the product (serenity_allocator) that import yaml."""
    package = ROOT / "src" / "serenity_allocator"
    found = []
    for source in package.rglob("*.py"):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "yaml" or n.startswith("yaml.") for n in names):
                found.append(str(source.relative_to(ROOT)))
    return sorted(set(found))


def _stage(target: Path) -> str:
    """Build the artifact into target the way sam build does; returns how it was built."""
    # What sam build does for CodeUri src/: copy the directory, pip install its
    # requirements.txt into the same tree (the one implementation: local/build.py).
    note("package: CodeUri src/ + pip install -r src/requirements.txt (python3.12/arm64)")
    failure: str | None = None
    try:
        stage_artifact(target)
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or "").strip().splitlines()
        failure = f"pip failed: {lines[-1] if lines else exc}"
    method = (
        "sam build's way (serenity_tools.operator.build.stage_artifact): src/ copied + "
        "pip install -r src/requirements.txt --platform manylinux2014_aarch64 "
        "--python-version 3.12 --only-binary=:all:"
    )
    if failure is not None:
        note(f"package: {failure}; falling back to this venv's installed files")
        shutil.rmtree(target)
        target.mkdir()
        _venv_copy(target)
        method = f"FALLBACK: this venv's installed files (host platform); {failure}"
    return method


def _drop_runtime_provided(target: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Delete what the Lambda runtime provides; bytes removed and bytes kept, by group."""
    removed: dict[str, int] = {}
    groups: dict[str, int] = {}
    for entry in target.iterdir():
        group = _top_level_of(entry)
        size = _tree_bytes(entry)
        if group in RUNTIME_PROVIDED:
            removed[group] = removed.get(group, 0) + size
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        else:
            groups[group] = groups.get(group, 0) + size
    return removed, groups


def measure_package() -> dict[str, Any]:
    """Build the artifact, drop what the runtime provides, and size what remains."""
    with tempfile.TemporaryDirectory(prefix="bench-artifact-") as scratch_name:
        scratch = Path(scratch_name)
        target = scratch / "artifact"
        target.mkdir()
        method = _stage(target)
        removed, groups = _drop_runtime_provided(target)
        tool_files = tool_files_in(target)
        total = sum(groups.values())
        zipped = _zip_bytes(target, scratch)
        layer = _layer_contents_mb(scratch)
    mb = 1024.0 * 1024.0
    yaml_users = _product_modules_importing_yaml()
    layer_provided = ("aws_lambda_powertools", "pydantic", "pydantic_core")
    layer_bytes = sum(groups.get(name, 0) for name in layer_provided)
    return {
        "method": method,
        "unzipped_mb": round(total / mb, 2),
        "zipped_mb": round(zipped / mb, 2),
        "target_mb": SIZE_TARGET_MB,
        "met": total / mb < SIZE_TARGET_MB,
        "x_target": ratio(total / mb, SIZE_TARGET_MB),
        "by_package_mb": {
            name: round(size / mb, 3)
            for name, size in sorted(groups.items(), key=lambda kv: kv[1], reverse=True)
        },
        "removed_runtime_provided_mb": {
            name: round(size / mb, 3) for name, size in removed.items()
        },
        "tool_files_in_artifact": tool_files,
        "yaml_imported_by_product": yaml_users,
        "without_pyyaml_mb": round((total - groups.get("yaml", 0)) / mb, 2),
        "with_powertools_layer_mb": round((total - layer_bytes) / mb, 2),
        "layer_provides_mb": layer,
        "layer_provides_total_mb": round(sum(layer.values()), 2) if layer else None,
        "template_uses_powertools_layer": _template_uses_layer(),
        "codeuri_has_requirements_txt": (ROOT / "src" / "requirements.txt").exists(),
        "pyproject_lists_pyyaml": _pyproject_lists_pyyaml(),
    }


def _pyproject_lists_pyyaml() -> bool:
    return any(
        "pyyaml" in dep.lower()
        for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    )


def _layer_contents_mb(scratch: Path) -> dict[str, float] | None:
    """What the Powertools layer carries for us: powertools + pydantic, built the same way."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wanted = [
        spec
        for spec in pyproject["project"]["dependencies"]
        if spec.lower().startswith(("aws-lambda-powertools", "pydantic"))
    ]
    target = scratch / "layer"
    target.mkdir()
    if _pip_build(target, wanted) is not None:
        return None
    sizes: dict[str, float] = {}
    for entry in target.iterdir():
        group = _top_level_of(entry)
        sizes[group] = sizes.get(group, 0.0) + _tree_bytes(entry) / (1024.0 * 1024.0)
    return {name: round(mb, 3) for name, mb in sorted(sizes.items(), key=lambda kv: -kv[1])}


def _template_uses_layer() -> bool:
    template = ROOT / "template.yaml"
    if not template.exists():
        return False
    text = template.read_text(encoding="utf-8")
    return "Layers:" in text or "AWSLambdaPowertoolsPython" in text


def measure() -> dict[str, Any]:
    """Both halves of the cold-start measurement."""
    note(f"cold start: import times, {RUNS} fresh processes per case (interleaved)")
    imports = measure_imports()
    package = measure_package()
    return {"imports": imports, "package": package}
