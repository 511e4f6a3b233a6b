"""`python -m bench.run`: run every measurement, write results.json, the README and the plots.

Each measurement is independent: one that fails is recorded with its error and the others
still run (the exit code is then 1). ``--only`` runs a subset and keeps the other sections of
an existing results.json, so a single measurement can be refreshed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import common  # noqa: F401 - sets the Powertools environment before handler imports
from .common import note

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results.json"
DOCS = ROOT / "docs" / "benchmarks"
SECTIONS = (
    "calls",
    "overhead",
    "throughput",
    "coldstart",
    "sweep",
    "writes",
    "ledger",
    "real_sizes",
    "pools",
)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip()


def _calls() -> dict[str, Any]:
    from serenity_tools.standins.simulator import start_simulator

    from . import calls
    from .common import BENCH_TOKEN

    with start_simulator(accepted_tokens=[BENCH_TOKEN]) as sim:
        return calls.measure(sim)


def _overhead() -> dict[str, Any]:
    from . import overhead

    return overhead.measure()


def _throughput(messages: int) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        try:
            from . import throughput
        except ImportError as exc:  # the local stack is someone else's module
            return {"skipped": f"local stack not available ({exc}); TODO: rerun when it is"}
        return throughput.measure(messages=messages)

    return run


def _coldstart() -> dict[str, Any]:
    from . import coldstart

    return coldstart.measure()


def _sweep() -> dict[str, Any]:
    from . import sweep_rate

    return sweep_rate.measure()


def _writes() -> dict[str, Any]:
    from . import writes

    return writes.measure()


def _real_sizes() -> dict[str, Any]:
    from serenity_tools.standins.simulator import start_simulator

    from . import real_sizes
    from .common import BENCH_TOKEN

    with start_simulator(accepted_tokens=[BENCH_TOKEN]) as sim:
        return real_sizes.measure(sim)


def _pools() -> dict[str, Any]:
    from . import pool_grid

    section = pool_grid.measure()
    section["commit"] = _commit()
    return section


def _ledger() -> dict[str, Any]:
    from . import ledger

    return ledger.measure()


def _run_sections(
    selected: list[str],
    runners: dict[str, Callable[[], dict[str, Any]]],
    results: dict[str, Any],
) -> bool:
    """Run each selected section into results, timed; True when any of them raised."""
    failed = False
    for key in selected:
        section_started = time.monotonic()
        try:
            section = runners[key]()
        except Exception as exc:
            traceback.print_exc()
            section = {"error": f"{type(exc).__name__}: {exc}"}
            failed = True
        section["seconds"] = round(time.monotonic() - section_started, 1)
        results[key] = section
        note(f"{key}: done in {section['seconds']} s")
    return failed


def _write(results: dict[str, Any], semrush_rps: float) -> None:
    """results.json with its summary rows, then the plots and pages under docs/benchmarks."""
    from . import plots, report

    results["summary"] = report.summary_rows(results)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    DOCS.mkdir(parents=True, exist_ok=True)
    written = plots.write_all(results, DOCS)
    (DOCS / "README.md").write_text(report.readme(results, written), encoding="utf-8")
    (DOCS / "scale.md").write_text(report.scale(results, semrush_rps), encoding="utf-8")
    if "error" not in results.get("writes", {"error": "not run"}):
        from . import writes

        (DOCS / "writes.md").write_text(writes.markdown(results["writes"]), encoding="utf-8")
    if "error" not in results.get("real_sizes", {"error": "not run"}):
        from . import real_sizes

        pools = results.get("writes", {}).get("real_sized_pools")
        (DOCS / "real-sizes.md").write_text(
            real_sizes.markdown(results["real_sizes"], pools), encoding="utf-8"
        )
    if "error" not in results.get("pools", {"error": "not run"}):
        from . import pool_grid

        (DOCS / "pools.md").write_text(pool_grid.markdown(results["pools"]), encoding="utf-8")
    note(f"wrote {RESULTS.relative_to(ROOT)}, docs/benchmarks/ ({len(written)} plots)")


def main(argv: list[str] | None = None) -> int:
    """Run, write, report; 0 when every selected measurement ran (targets met or not)."""
    parser = argparse.ArgumentParser(description="serenity-allocator benchmarks")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument(
        "--e2e-messages",
        type=int,
        default=400,
        help="messages per concurrency level on the local stack (the issue's full size: 2000)",
    )
    parser.add_argument(
        "--semrush-rps",
        type=float,
        default=50.0,
        help="Semrush rate limit (calls/s) assumed in scale.md",
    )
    args = parser.parse_args(argv)

    selected = args.only or list(SECTIONS)
    results: dict[str, Any] = {}
    if args.only and RESULTS.exists():
        results = json.loads(RESULTS.read_text(encoding="utf-8"))
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "calls": _calls,
        "overhead": _overhead,
        "throughput": _throughput(args.e2e_messages),
        "coldstart": _coldstart,
        "sweep": _sweep,
        "writes": _writes,
        "ledger": _ledger,
        "real_sizes": _real_sizes,
        "pools": _pools,
    }
    started = time.monotonic()
    failed = _run_sections(selected, runners, results)

    results["meta"] = {
        "finished": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": round(time.monotonic() - started, 1),
        "sections_run": selected,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "commit": _commit(),
        "argv": sys.argv[1:] if argv is None else argv,
        "semrush_rps": args.semrush_rps,
    }
    _write(results, args.semrush_rps)
    for row in results["summary"]:
        flag = "met" if row["met"] else "NOT met"
        print(f"{row['measurement']}: {row['ratio']} (target {row['target']}: {flag})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
