"""Count the metrics in Embedded Metric Format lines (what CloudWatch would extract).

Handlers print EMF blobs on stdout among their log lines; this reads such output back and sums
each metric per (name, own dimension, value), ignoring the dimensions every metric carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMMON_DIMENSIONS = frozenset({"service", "Environment", "function_name"})
"""Dimensions every metric (or Powertools' ColdStart) carries; not the metric's own."""


@dataclass(frozen=True, order=True)
class MetricKey:
    """A metric and its own dimension (None for metrics without one)."""

    name: str
    dimension: str | None = None
    value: str | None = None


@dataclass
class MetricTotal:
    """All values seen for one key."""

    unit: str
    samples: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float:
        """Average value (0 when no samples)."""
        return self.total / self.samples if self.samples else 0.0


def parse_emf(line: str) -> list[tuple[MetricKey, str, list[float]]]:
    """The metrics of one EMF line as (key, unit, values); empty for any other line."""
    try:
        blob = json.loads(line)
    except ValueError:
        return []
    if not isinstance(blob, dict) or "_aws" not in blob:
        return []
    found: list[tuple[MetricKey, str, list[float]]] = []
    for directive in blob["_aws"].get("CloudWatchMetrics", []):
        found += _directive_metrics(blob, directive)
    return found


def _directive_metrics(
    blob: dict[str, Any], directive: dict[str, Any]
) -> list[tuple[MetricKey, str, list[float]]]:
    dimension_sets: list[list[str]] = directive.get("Dimensions") or [[]]
    own = [d for d in dimension_sets[0] if d not in COMMON_DIMENSIONS]
    dimension = own[0] if own else None
    value = str(blob.get(dimension)) if dimension else None
    found: list[tuple[MetricKey, str, list[float]]] = []
    for metric in directive.get("Metrics", []):
        name = metric.get("Name")
        raw: Any = blob.get(name)
        values = raw if isinstance(raw, list) else [raw]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        found.append((MetricKey(name, dimension, value), metric.get("Unit", "None"), numbers))
    return found


def count_metrics(lines: Iterable[str]) -> dict[MetricKey, MetricTotal]:
    """Sum every metric in ``lines`` per key."""
    totals: dict[MetricKey, MetricTotal] = {}
    for line in lines:
        if '"_aws"' not in line:
            continue
        for key, unit, values in parse_emf(line):
            total = totals.setdefault(key, MetricTotal(unit))
            total.samples += len(values)
            total.total += sum(values)
    return totals


def count_metrics_in_files(paths: Iterable[Path]) -> dict[MetricKey, MetricTotal]:
    """:func:`count_metrics` over the lines of several files (missing files are skipped)."""

    def lines() -> Iterable[str]:
        for path in paths:
            if path.exists():
                yield from path.read_text(encoding="utf-8", errors="replace").splitlines()

    return count_metrics(lines())
