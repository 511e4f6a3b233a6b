"""``serenity-allocator harness``: run scenarios, print their invariant tables and a summary."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from serenity_tools.standins.aws_endpoints import (
    add_endpoint_flag,
    endpoints_from_args,
)
from serenity_tools.verification.harness import scenarios
from serenity_tools.verification.harness.config import SCENARIOS, HarnessConfig
from serenity_tools.verification.harness.results import ScenarioResult, summary_table


def _consumer_counts(value: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {value!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("consumer counts must be positive")
    return counts


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator harness`` options."""
    defaults = HarnessConfig()
    parser.add_argument(
        "--scenario", choices=[*SCENARIOS, "all"], default="concurrency", help="what to run"
    )
    parser.add_argument("--children", type=int, default=defaults.children)
    parser.add_argument("--requests", type=int, default=defaults.requests)
    parser.add_argument(
        "--consumers",
        type=_consumer_counts,
        default=(1, 2, 4, 8),
        metavar="C[,C...]",
        help="consumer processes; a list runs the scenario once per count (default 1,2,4,8)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    parser.add_argument(
        "--visibility-timeout-s",
        type=int,
        default=None,
        help="queue visibility timeout for every scenario (default: each scenario's own)",
    )
    parser.add_argument(
        "--crash-probability", type=float, default=defaults.crash_probability, help="per batch"
    )
    parser.add_argument(
        "--poison", type=int, default=None, help="poison messages (default: requests / 10)"
    )
    parser.add_argument("--drain-timeout-s", type=float, default=defaults.drain_timeout_s)
    parser.add_argument("--work-dir", type=Path, default=None, help="traces and logs")
    parser.add_argument(
        "--credentials",
        choices=["ims", "static"],
        default=defaults.credentials,
        help="ims (default): every request with its user's promise token, the real path; "
        "static: the simulator's bearer (standard-queue and sweep-crash always run static)",
    )
    parser.add_argument("--json", type=Path, default=None, dest="json_path", help="results file")
    add_endpoint_flag(parser)


def _config(args: argparse.Namespace, consumers: int) -> HarnessConfig:
    return HarnessConfig(
        children=args.children,
        requests=args.requests,
        consumers=consumers,
        seed=args.seed,
        latency_ms=args.latency_ms,
        visibility_timeout_s=args.visibility_timeout_s,
        crash_probability=args.crash_probability,
        poison=args.poison,
        drain_timeout_s=args.drain_timeout_s,
        work_dir=args.work_dir,
        endpoints=endpoints_from_args(args),
        credentials=args.credentials,
    )


def _run_all(args: argparse.Namespace) -> list[ScenarioResult]:
    chosen = SCENARIOS if args.scenario == "all" else (args.scenario,)
    results: list[ScenarioResult] = []
    for scenario in chosen:
        counts = (1,) if scenario == "sweep-crash" else args.consumers
        for consumers in counts:
            config = _config(args, consumers)
            print(f"# running {scenario} (C = {consumers}) ...", file=sys.stderr, flush=True)
            result = scenarios.run_scenario(scenario, config)
            print(result.report() + "\n", flush=True)
            results.append(result)
    return results


def run(args: argparse.Namespace) -> int:
    """Run the chosen scenario(s) once per consumer count; exit 1 if any check failed."""
    try:
        results = _run_all(args)
    except ValueError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2
    print(summary_table(results))
    if args.json_path is not None:
        args.json_path.write_text(
            json.dumps([r.as_json() for r in results], indent=2, default=str) + "\n",
            encoding="utf-8",
        )
    return 0 if all(r.passed for r in results) else 1
