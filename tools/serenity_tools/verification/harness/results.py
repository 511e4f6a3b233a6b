"""A scenario's result: its checks, numbers and tables, as a report or JSON."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from serenity_tools.verification.checks import explained_lines
from serenity_tools.verification.harness.config import HarnessConfig
from serenity_tools.verification.harness.drain import DrainedRun
from serenity_tools.verification.invariants import InvariantResult
from serenity_tools.verification.replays import explained_table
from serenity_tools.verification.reports import (
    calls_table,
    dlq_table,
    invariants_table,
    metrics_table,
    outcomes_table,
)
from serenity_tools.verification.tables import format_table


@dataclass
class ScenarioResult:
    """One scenario run: its checks, the numbers it measured and the tables it printed.

    Attributes:
        scenario: The scenario's name.
        config: Its configuration.
        duration_s: Wall time of the run (stack start included).
        checks: Gate the result: every one must pass.
        observations: Reported only (the standard-queue contrast's invariant table).
        numbers: Counts and timings, for the report and the docs.
        tables: Detail tables, already rendered.
    """

    scenario: str
    config: HarnessConfig
    duration_s: float = 0.0
    checks: list[InvariantResult] = field(default_factory=list)
    observations: list[InvariantResult] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every gating check passed."""
        return all(check.passed for check in self.checks)

    @property
    def title(self) -> str:
        """One line naming the run."""
        c = self.config
        if self.scenario == "sweep-crash":
            return f"sweep-crash: {c.children} targets, seed {c.seed}"
        return (
            f"{self.scenario}: {c.children} children, {c.requests} requests, "
            f"C = {c.consumers}, seed {c.seed}"
        )

    def report(self) -> str:
        """The full text report: title, tables, numbers, observations, checks, verdict."""
        parts = [f"=== {self.title} ===", *self.tables]
        if self.numbers:
            rows = [[name, value] for name, value in self.numbers.items()]
            parts.append(format_table(["measure", "value"], rows, title="Numbers"))
        if self.observations:
            parts.append(_observations_table(self.observations))
        explained = explained_lines([*self.checks, *self.observations])
        if explained:
            parts.append(explained_table(explained))
        parts.append(invariants_table(self.checks))
        parts.append(f"{'PASS' if self.passed else 'FAIL'}: {self.title} ({self.duration_s:.1f} s)")
        if any(c.name.startswith("broker") and not c.passed for c in self.checks):
            parts.append(
                "  the BROKER broke FIFO order: an order violation above is the broker's, "
                "not the allocator's"
            )
        return "\n\n".join(parts)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready summary (for ``--json``)."""
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.config).items()}

        def rows(results: Sequence[InvariantResult]) -> list[dict[str, Any]]:
            return [
                {
                    "name": r.name,
                    "passed": r.passed,
                    "detail": r.detail,
                    "violations": len(r.violations),
                    "explained": len(r.explained),
                }
                for r in results
            ]

        return {
            "scenario": self.scenario,
            "config": config,
            "passed": self.passed,
            "duration_s": round(self.duration_s, 1),
            "numbers": self.numbers,
            "checks": rows(self.checks),
            "observations": rows(self.observations),
        }


def _observations_table(observations: Sequence[InvariantResult]) -> str:
    rows = [
        [r.name, "holds" if r.passed else "VIOLATED", len(r.violations), _clip(r.detail)]
        for r in observations
    ]
    return format_table(
        ["invariant", "on this queue", "violations", "detail"],
        rows,
        title="Invariants observed (reported, not required)",
    )


def _clip(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def run_numbers(run: DrainedRun, requests: int) -> dict[str, Any]:
    """The counts and timings every FIFO scenario reports."""
    window = max(run.duration_s, 1e-9)
    return {
        "drain time (s)": round(run.duration_s, 1),
        "requests per second": round(requests / window, 1),
        "batches": run.traces.batches,
        "messages received": run.traces.received,
        "batch item failures": run.traces.item_failures,
        "Semrush calls": len(run.calls),
        "outcome events": len(run.outcomes),
        "dead letters": len(run.letters),
        **_ims_numbers(run, requests),
    }


def _ims_numbers(run: DrainedRun, requests: int) -> dict[str, Any]:
    """Under IMS: the IMS calls, and the worker's (exchange, invalidate) per request."""
    if run.identity is None:
        return {}
    ops = Counter(str(call.get("op")) for call in run.ims_calls)
    worker = ops["ims_exchange"] + ops["ims_invalidate"]
    return {
        "IMS mints (services)": ops["ims_mint"],
        "IMS exchanges": ops["ims_exchange"],
        "IMS invalidations": ops["ims_invalidate"],
        "worker IMS calls per request": round(worker / max(1, requests), 2),
    }


def detail_tables(run: DrainedRun) -> list[str]:
    """Outcomes, Semrush calls, metrics and the DLQ of a run."""
    letters = run.letters
    if len(letters) > 20:
        reasons = Counter((letter.reason or "redriven").split(":")[0] for letter in letters)
        dlq = format_table(
            ["reason (first field)", "letters"],
            sorted(reasons.items()),
            title=f"Dead-letter queue ({len(letters)})",
        )
    else:
        dlq = dlq_table(letters)
    return [
        outcomes_table(run.outcomes),
        calls_table(run.calls),
        metrics_table(run.pool.stdout_paths),
        dlq,
    ]


def finished(
    name: str,
    config: HarnessConfig,
    started: float,
    checks: list[InvariantResult],
    numbers: dict[str, Any],
    run: DrainedRun,
) -> ScenarioResult:
    """A scenario's result, timed from ``started``, with the run's detail tables."""
    return ScenarioResult(
        name,
        config,
        time.monotonic() - started,
        checks,
        numbers=numbers,
        tables=detail_tables(run),
    )


def summary_table(results: Sequence[ScenarioResult]) -> str:
    """One row per run: sizes, time, throughput and the verdict."""
    rows = [
        [
            r.scenario,
            r.config.children,
            "-" if r.scenario == "sweep-crash" else r.config.requests,
            "-" if r.scenario == "sweep-crash" else r.config.consumers,
            round(r.duration_s, 1),
            r.numbers.get("requests per second"),
            sum(1 for c in r.checks if c.passed),
            len(r.checks),
            "PASS" if r.passed else "FAIL",
        ]
        for r in results
    ]
    return format_table(
        ["scenario", "children", "requests", "C", "seconds", "req/s", "passed", "checks", "result"],
        rows,
        title="Harness summary",
    )
