"""What the ``sweep`` command saw of a run, and how it shows it: the summary table and the report.

The report is the run's items (every batch's lines) as JSON or CSV, written at the end.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serenity_allocator.domain.sweep.model import SweepCounts

FAILED_SHOWN = 20
"""Failed targets the summary names one by one (the report lists them all)."""

COUNT_NAMES = tuple(SweepCounts.model_fields)
"""The run's counters, in the order the domain declares them."""

REPORT_COLUMNS = (
    "workspace_id",
    "parent_workspace_id",
    "outcome",
    "before_projects",
    "before_prompts",
    "target_projects",
    "target_prompts",
    "units_returned_projects",
    "units_returned_prompts",
    "error_code",
    "request_id",
    "tiered",
    "attempt",
    "final",
)


@dataclass
class SweepRun:
    """What the loop saw of one run: the latest result, every item, and how it ended."""

    payload: dict[str, Any]
    results: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    interrupted: bool = False

    @property
    def last(self) -> dict[str, Any] | None:
        """The latest batch result, if any."""
        return self.results[-1] if self.results else None

    @property
    def run_id(self) -> str | None:
        """The run's id (from the latest result, else from the payload)."""
        if self.last is not None:
            return str(self.last["run_id"])
        run_id = self.payload.get("run_id")
        return None if run_id is None else str(run_id)

    @property
    def dry_run(self) -> bool:
        """Whether the run previews only."""
        if self.last is not None and "dry_run" in self.last:
            return bool(self.last["dry_run"])
        return bool(self.payload.get("dry_run", True))

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Every target that ended failed, and why (from the latest result)."""
        return list((self.last or {}).get("failed") or [])

    @property
    def counts(self) -> dict[str, int]:
        """The run's running counts (cumulative across invocations, from its checkpoint)."""
        counts = self.last["counts"] if self.last is not None else {}
        return {name: int(counts.get(name, 0)) for name in COUNT_NAMES}

    @property
    def done(self) -> bool:
        """The run processed every target."""
        return self.last is not None and bool(self.last["done"])

    @property
    def aborted(self) -> bool:
        """The run stopped after too many consecutive unexpected errors."""
        return self.last is not None and bool(self.last["aborted"])

    @property
    def succeeded(self) -> bool:
        """Finished, not aborted, no invocation error and no unexpected error."""
        return (
            self.error is None
            and not self.interrupted
            and self.done
            and not self.aborted
            and self.counts["unexpected_errors"] == 0
        )

    @property
    def status(self) -> str:
        """One word for the summary and the report."""
        if self.interrupted:
            return "interrupted"
        if self.error is not None:
            return "failed"
        if self.aborted:
            return "aborted"
        if self.done:
            return "done" if self.succeeded else "done-with-unexpected-errors"
        return "incomplete"

    def add(self, result: dict[str, Any]) -> None:
        """Take in one batch result."""
        self.results.append(result)
        self.items.extend(result.get("items") or [])


def format_summary(run: SweepRun) -> str:
    """The end-of-run table: status, progress, one row per count, where the checkpoint is."""
    last = run.last or {}
    rows = [
        *_status_rows(run, last),
        ("processed", f"{last.get('processed', 0)} / {last.get('total', '?')}"),
        *((name, str(value)) for name, value in run.counts.items()),
        *_failed_rows(run.failed),
    ]
    if last.get("checkpoint"):
        rows.append(("checkpoint", str(last["checkpoint"])))
    return _table(rows)


def _status_rows(run: SweepRun, last: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Which run, how it ended, and why when it was aborted or an invocation failed."""
    kind = "dry run" if run.dry_run else "real run"
    rows = [("run", f"{run.run_id or '-'} ({kind})"), ("status", run.status)]
    if last.get("abort_reason"):
        rows.append(("abort reason", str(last["abort_reason"])))
    if run.error is not None:
        rows.append(("error", f"{run.error.get('errorType')}: {run.error.get('errorMessage')}"))
    return rows


def _failed_rows(failed: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The first FAILED_SHOWN failed targets by name, then how many more the report holds."""
    rows = [
        (
            f"failed {target['workspace_id']}",
            f"{target['error_code']} after {target['attempts']} attempt(s)",
        )
        for target in failed[:FAILED_SHOWN]
    ]
    if len(failed) > FAILED_SHOWN:
        rows.append(("failed (more)", f"{len(failed) - FAILED_SHOWN} more in the report"))
    return rows


def _table(rows: Sequence[tuple[str, str]]) -> str:
    """Labels padded to one column, between two rules as wide as the widest row."""
    width = max(len(label) for label, _ in rows)
    rule = "-" * (width + 2 + max(len(value) for _, value in rows))
    return "\n".join([rule, *(f"{label:<{width}}  {value}" for label, value in rows), rule])


def _flat_item(item: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {column: "" for column in REPORT_COLUMNS}
    for key in (
        "workspace_id",
        "parent_workspace_id",
        "outcome",
        "error_code",
        "request_id",
        "tiered",
        "attempt",
        "final",
    ):
        value = item.get(key)
        row[key] = "" if value is None else value
    for key in ("before", "target", "units_returned"):
        totals = item.get(key) or {}
        for dim in ("projects", "prompts"):
            value = totals.get(dim)
            row[f"{key}_{dim}"] = "" if value is None else value
    return row


def write_report(path: Path, run: SweepRun) -> None:
    """Write every per-child line of the run: JSON (with the summary) or CSV, by extension."""
    if path.suffix.lower() == ".csv":
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=REPORT_COLUMNS)
            writer.writeheader()
            for item in run.items:
                writer.writerow(_flat_item(item))
        return
    last = run.last or {}
    document = {
        "run_id": run.run_id,
        "dry_run": run.dry_run,
        "status": run.status,
        "done": run.done,
        "aborted": run.aborted,
        "abort_reason": last.get("abort_reason"),
        "processed": last.get("processed", 0),
        "remaining": last.get("remaining"),
        "total": last.get("total"),
        "counts": run.counts,
        "checkpoint": last.get("checkpoint"),
        "invocations": len(run.results),
        "error": run.error,
        "failed": run.failed,
        "failed_listed_all": last.get("failed_listed_all", True),
        "items": run.items,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- flags -> payload
