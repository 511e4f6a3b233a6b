"""``make stress``: the demo and harness scenarios while every core is kept busy.

A laptop running a browser and an IDE, or a CI runner shared with other jobs, gives the local
stack a fraction of the CPU. This command reproduces that on purpose: it starts one CPU-bound
process per core (a "burner", a busy loop at normal priority), runs the demo and the chosen
harness scenarios with them running, stops the burners (each by its own pid, always, even on
Ctrl-C or a failure) and prints every invariant table and a summary. A slow run must still
pass: the checks fail on violations only; replays the traces explain (a consumer killed by a
crash or its function timeout) are reported, not failed.

Run it with ``make stress`` or ``python -m serenity_tools.verification.stress``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from serenity_tools.standins.aws_endpoints import (
    AwsEndpoints,
    add_endpoint_flag,
    endpoints_from_args,
)
from serenity_tools.verification.demo import DemoConfig, run_demo
from serenity_tools.verification.harness.config import SCENARIOS, HarnessConfig
from serenity_tools.verification.harness.scenarios import run_scenario
from serenity_tools.verification.tables import format_table

DEFAULT_SCENARIOS = ("concurrency", "crash")
"""The main scenario on the default timings, and the one ABOUT short timeouts."""
_BURN = "while True:\n    pass\n"


@dataclass(frozen=True)
class StressRun:
    """One run under load: what ran, its verdict and what it measured."""

    name: str
    passed: bool
    seconds: float
    explained_replays: int
    load_average: float


@contextlib.contextmanager
def burners(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Keep ``count`` cores busy for the duration; stop exactly those processes afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            started.append(
                subprocess.Popen(
                    [sys.executable, "-c", _BURN],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _demo(work_dir: Path | None, endpoints: AwsEndpoints) -> tuple[StressRun, str]:
    out = io.StringIO()
    started = time.monotonic()
    config = DemoConfig(work_dir=work_dir / "demo" if work_dir else None, endpoints=endpoints)
    code = run_demo(config, out)
    report = out.getvalue()
    explained = _explained_count(report)
    run = StressRun("demo", code == 0, time.monotonic() - started, explained, _load())
    return run, report


def _explained_count(report: str) -> int:
    # The demo's verdict line names the explained replays; 0 when it does not.
    found = re.search(r"(\d+) replays explained", report)
    return int(found.group(1)) if found else 0


def _scenario(name: str, config: HarnessConfig) -> tuple[StressRun, str]:
    started = time.monotonic()
    result = run_scenario(name, config)
    explained = sum(len(check.explained) for check in [*result.checks, *result.observations])
    run = StressRun(
        f"harness {name} (C = {config.consumers})",
        result.passed,
        time.monotonic() - started,
        explained,
        _load(),
    )
    return run, result.report()


def summary(runs: Sequence[StressRun], burner_count: int) -> str:
    """One row per run: verdict, wall time, explained replays, load average at its end."""
    rows = [
        [
            r.name,
            "PASS" if r.passed else "FAIL",
            round(r.seconds, 1),
            r.explained_replays,
            r.load_average,
        ]
        for r in runs
    ]
    return format_table(
        ["run", "result", "seconds", "explained replays", "load avg (1 min)"],
        rows,
        title=f"Stress summary ({burner_count} CPU burners on {os.cpu_count()} cores)",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the stress options."""
    parser.add_argument(
        "--burners",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU-bound processes (default: one per core)",
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[s for s in SCENARIOS if s != "standard-queue"],
        help=f"harness scenario to run (repeatable; default: {', '.join(DEFAULT_SCENARIOS)})",
    )
    parser.add_argument("--children", type=int, default=24)
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-demo", action="store_true", help="skip the demo")
    parser.add_argument("--work-dir", type=Path, default=None, help="traces and logs")
    add_endpoint_flag(parser)


def run(args: argparse.Namespace) -> int:
    """Start the burners, run everything, stop the burners, print tables; 1 on any FAIL."""
    config = HarnessConfig(
        children=args.children,
        requests=args.requests,
        consumers=args.consumers,
        seed=args.seed,
        work_dir=args.work_dir,
        endpoints=endpoints_from_args(args),
    )
    runs: list[StressRun] = []
    print(f"# stress: starting {args.burners} CPU burners ...", file=sys.stderr, flush=True)
    with burners(args.burners):
        time.sleep(1.0)  # let the burners take the cores before the first stack starts
        if not args.no_demo:
            print("# stress: make demo ...", file=sys.stderr, flush=True)
            demo_run, report = _demo(args.work_dir, config.endpoints)
            runs.append(demo_run)
            print(report, flush=True)
        for name in args.scenario or DEFAULT_SCENARIOS:
            print(f"# stress: harness {name} ...", file=sys.stderr, flush=True)
            scenario_run, report = _scenario(name, config)
            runs.append(scenario_run)
            print(report + "\n", flush=True)
    print(summary(runs, args.burners))
    return 0 if all(r.passed for r in runs) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(
        prog="stress", description="the demo and harness scenarios with every core kept busy"
    )
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
