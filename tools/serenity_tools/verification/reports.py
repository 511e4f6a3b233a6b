"""The report tables the demo and the harness print."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_tools.standins.stack import DeadLetter
from serenity_tools.verification.emf import count_metrics_in_files
from serenity_tools.verification.invariants import InvariantResult, workspace_dim
from serenity_tools.verification.tables import format_table


def _fmt_change(before: int, after: int) -> str:
    return f"{before}" if before == after else f"{before} -> {after}"


def pool_table(
    before: Mapping[str, Mapping[str, Any]],
    after: Mapping[str, Mapping[str, Any]],
    kinds: Mapping[str, str],
    master_id: str,
) -> str:
    """The pool row and every child whose totals changed."""
    dim = workspace_dim  # a tiered child's prompts: its tightest tier

    rows: list[list[object]] = []
    changed = 0
    for workspace_id, old in before.items():
        new = after[workspace_id]
        moved = any(dim(old, d, "total") != dim(new, d, "total") for d in ("projects", "prompts"))
        is_master = workspace_id == master_id
        if not moved and not is_master:
            continue
        changed += 0 if is_master else 1
        rows.append(
            [
                workspace_id,
                "org pool" if is_master else kinds.get(workspace_id, "?"),
                new.get("status"),
                _fmt_change(dim(old, "projects", "used"), dim(new, "projects", "used")),
                _fmt_change(dim(old, "projects", "total"), dim(new, "projects", "total")),
                _fmt_change(dim(old, "prompts", "used"), dim(new, "prompts", "used")),
                dim(new, "prompts", "drafted"),
                _fmt_change(dim(old, "prompts", "total"), dim(new, "prompts", "total")),
            ]
        )
    unchanged = len(before) - 1 - changed
    return format_table(
        [
            "workspace",
            "kind",
            "status",
            "proj used",
            "proj total",
            "prompts used",
            "drafted",
            "prompts total",
        ],
        rows,
        title=f"Org pool and children, before -> after ({changed} changed, "
        f"{unchanged} unchanged not shown)",
    )


def outcomes_table(outcomes: Sequence[AllocationOutcome]) -> str:
    """Outcomes counted by kind, source, status and error code."""
    counts = Counter(
        (o.kind, o.source or "service", o.status, o.error_code or "") for o in outcomes
    )
    rows = [[*key, count] for key, count in sorted(counts.items())]
    return format_table(
        ["kind", "source", "status", "error code", "count"],
        rows,
        title=f"Outcome events captured from the bus ({len(outcomes)})",
    )


def calls_table(calls: Sequence[Mapping[str, Any]]) -> str:
    """Semrush calls by operation and status."""
    counts = Counter((str(c.get("op")), int(c.get("status", 0))) for c in calls)
    rows = [[op, status, count] for (op, status), count in sorted(counts.items())]
    return format_table(
        ["operation", "status", "calls"], rows, title=f"Semrush calls made ({len(calls)})"
    )


def ims_table(ims_calls: Sequence[Mapping[str, Any]], requests: int) -> str:
    """IMS calls by operation and status, with the users they served and calls per request."""
    counts = Counter((str(c.get("op")), int(c.get("status", 0))) for c in ims_calls)
    users: dict[tuple[str, int], set[str]] = {}
    for call in ims_calls:
        key = (str(call.get("op")), int(call.get("status", 0)))
        if call.get("user"):
            users.setdefault(key, set()).add(str(call["user"]))
    rows = [
        [op, status, count, len(users.get((op, status), ()))]
        for (op, status), count in sorted(counts.items())
    ]
    per_request = round(len(ims_calls) / requests, 2) if requests else 0
    return format_table(
        ["operation", "status", "calls", "users"],
        rows,
        title=f"IMS calls made ({len(ims_calls)}, {per_request} per request: mint at enqueue, "
        "exchange before each attempt, invalidate at the end)",
    )


def metrics_table(paths: Sequence[Path]) -> str:
    """Metric counts parsed from the EMF lines of the consumers and the sweep."""
    rows: list[list[object]] = []
    for key, total in sorted(count_metrics_in_files(paths).items()):
        dimension = f"{key.dimension}={key.value}" if key.dimension else ""
        summed = total.total if total.unit == "Count" else None
        mean = None if total.unit == "Count" else round(total.mean, 1)
        rows.append([key.name, dimension, total.unit, total.samples, summed, mean])
    return format_table(
        ["metric", "dimension", "unit", "samples", "sum", "mean"],
        rows,
        title="Metrics counted from the EMF output (service, Environment=local)",
    )


def dlq_table(letters: Sequence[DeadLetter]) -> str:
    """What ended in the dead-letter queue, and why."""
    rows = [
        [
            letter.group_id,
            letter.request_id or "(unparseable)",
            letter.reason or f"redriven after {letter.receive_count} receives",
        ]
        for letter in letters
    ]
    return format_table(
        ["group", "request", "why"], rows, title=f"Dead-letter queue ({len(letters)})"
    )


def sweep_table(dry: Sequence[Mapping[str, Any]], real: Sequence[Mapping[str, Any]]) -> str:
    """The two sweep runs' final counts."""
    rows: list[list[object]] = []
    for label, results in (("dry run", dry), ("real", real)):
        if not results:
            continue
        last = results[-1]
        counts = last["counts"]
        rows.append(
            [
                label,
                len(results),
                last["processed"],
                counts["would_release"],
                counts["enqueued"],
                counts["nothing_to_release"],
                counts["skipped_not_created"],
                counts["expected_errors"] + counts["unexpected_errors"],
            ]
        )
    return format_table(
        [
            "sweep",
            "invocations",
            "targets",
            "would release",
            "enqueued",
            "nothing",
            "skipped",
            "errors",
        ],
        rows,
        title="Rightsizing sweep",
    )


def invariants_table(results: Sequence[InvariantResult]) -> str:
    """PASS/FAIL per check."""
    rows = [[r.name, "PASS" if r.passed else "FAIL", r.detail] for r in results]
    return format_table(["check", "result", "detail"], rows, title="Invariant checks")
