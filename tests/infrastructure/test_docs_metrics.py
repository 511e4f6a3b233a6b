"""Every metric name and dimension the docs name is one the code emits.

The catalogs are code: ``adapters.observability.METRIC_CATALOG`` (the allocator's functions:
dimensions ``service``, ``Environment`` and at most one of their own) and
``write_guard.SERVICE_METRIC_CATALOG`` (what a service's process emits through the library:
``Environment`` and their own; ``service`` is a property). Checked in README.md,
clients/node/README.md and every Markdown file under docs/ (runbooks and ADRs included):

- ``Metric{Dim=value, ...}`` and ``Metric{value}``: a cataloged metric, each dimension one it
  carries, each value (``a|b`` alternatives too) one it takes; ``<...>`` and ``...`` are
  placeholders;
- Metrics Insights ``SELECT STAT(Metric) FROM SCHEMA("ns", d1, ...)``: exactly its dimensions;
- Logs Insights ``ispresent(Metric)``: a cataloged metric;
- docs/metrics.md's metric tables: one row per cataloged metric, no row for anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from serenity_allocator.adapters.observability import METRIC_CATALOG
from serenity_allocator.write_guard import SERVICE_METRIC_CATALOG
from tests.infrastructure._template import ROOT

NAMESPACE = "SerenityAllocator"
CALLERS_OWN = {"PromptsCreated"}
"""A calling service's own metric, named in docs/metrics.md as the example of what we must not
change: not ours, so not in a catalog."""
POWERTOOLS = {"ColdStart": {"function_name": (), "service": ()}}
"""Emitted by Powertools in the allocator's functions (``capture_cold_start_metric``)."""


@dataclass(frozen=True)
class Known:
    """One emitted metric: its dimensions, each with its values (empty: any value)."""

    dimensions: dict[str, tuple[str, ...]]

    def own_values(self) -> set[str]:
        return {v for values in self.dimensions.values() for v in values}


def _known() -> dict[str, Known]:
    known = {name: Known(dict(dims)) for name, dims in POWERTOOLS.items()}
    for name, spec in METRIC_CATALOG.items():
        dims: dict[str, tuple[str, ...]] = {"service": (), "Environment": ()}
        if spec.dimension:
            dims[spec.dimension] = spec.values
        known[name] = Known(dims)
    for name, service_spec in SERVICE_METRIC_CATALOG.items():
        assert name not in known, name  # one metric, one catalog
        known[name] = Known({"Environment": (), **service_spec.dimensions})
    return known


KNOWN = _known()
DOCS = sorted(
    [ROOT / "README.md", ROOT / "clients" / "node" / "README.md", *(ROOT / "docs").rglob("*.md")]
)
_BRACED = re.compile(r"\b([A-Z][A-Za-z]+)\{([^{}\n]*)\}")
_SCHEMA = re.compile(r'SELECT \w+\((\w+)\) FROM SCHEMA\("([^"]+)",\s*([^)]*)\)')
_PRESENT = re.compile(r"ispresent\((\w+)\)")


def _placeholder(value: str) -> bool:
    return value in ("...", "…") or (value.startswith("<") and value.endswith(">"))


def braced_problems(text: str) -> list[str]:
    """What is wrong with each ``Metric{...}`` in ``text`` (empty: nothing)."""
    problems = []
    for name, inside in _BRACED.findall(text):
        ref = f"{name}{{{inside}}}"
        if name in CALLERS_OWN:
            continue
        if name not in KNOWN:
            problems.append(f"{ref}: no metric {name} in the catalogs")
            continue
        known = KNOWN[name]
        for item in (part.strip() for part in inside.split(",")):
            dimension, _, values = item.rpartition("=")
            if dimension and dimension not in known.dimensions:
                problems.append(f"{ref}: {name} has no dimension {dimension}")
                continue
            allowed = set(known.dimensions[dimension]) if dimension else known.own_values()
            for value in values.split("|"):
                if allowed and not _placeholder(value) and value not in allowed:
                    problems.append(f"{ref}: {value!r} is not a value of {name}")
    return problems


def query_problems(text: str) -> list[str]:
    """What is wrong with each Metrics Insights SCHEMA and Logs Insights ispresent()."""
    problems = []
    for metric, namespace, dimensions in _SCHEMA.findall(text):
        names = {d.strip() for d in dimensions.split(",") if d.strip()}
        if namespace != NAMESPACE or metric not in KNOWN:
            problems.append(f"SCHEMA of {metric} in {namespace}: not a cataloged metric")
        elif names != set(KNOWN[metric].dimensions):
            problems.append(f"SCHEMA of {metric}: {sorted(names)} is not its dimension set")
    problems += [
        f"ispresent({metric}): not a cataloged metric"
        for metric in _PRESENT.findall(text)
        if metric not in KNOWN
    ]
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_metric_the_docs_name_is_emitted_with_those_dimensions(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert braced_problems(text) + query_problems(text) == []


def test_the_metric_catalog_doc_has_one_row_per_emitted_metric() -> None:
    # Given docs/metrics.md's metric tables (a row whose first cell is one backticked name)
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([A-Z][A-Za-z]+)` \| (?:Count|Milliseconds|Percent)", text, re.M)
    # Then every cataloged metric has exactly one row, and no row names anything else
    assert sorted(rows) == sorted([*METRIC_CATALOG, *SERVICE_METRIC_CATALOG])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("`ReleaseOutcome{Reason=released}`", "ReleaseOutcome has no dimension Reason"),
        ("`HeadroomCheck{hotpath}`", "'hotpath' is not a value of HeadroomCheck"),
        ("`ReleaseOutcomes{released}`", "no metric ReleaseOutcomes in the catalogs"),
        ("`QuotaRetryOutcome{service=brands}`", "QuotaRetryOutcome has no dimension service"),
        ("`TightPoolFallback{Result=saved|lost}`", "'lost' is not a value of TightPoolFallback"),
        (
            'SELECT SUM(MeteredQuotaClassifier) FROM SCHEMA("SerenityAllocator", Matched)',
            "['Matched'] is not its dimension set",
        ),
        ("filter ispresent(QuotaRetryOutcomes)", "ispresent(QuotaRetryOutcomes): not a cataloged"),
    ],
)
def test_the_check_finds_a_wrong_name_dimension_or_value(text: str, problem: str) -> None:
    problems = braced_problems(text) + query_problems(text)
    assert len(problems) == 1
    assert problem in problems[0]


def test_the_check_passes_what_the_code_emits() -> None:
    text = (
        "`AllocationRejection{Reason=workspaceBusy}` `TieredWorkspace{Role=child|pool}` "
        "`MeteredQuotaClassifier{Environment=<env>, Matched=true}` `CredentialOutcome{...}` "
        "`SiblingReclaim{served}` "
        'SELECT COUNT(QuotaRetryOutcome) FROM SCHEMA("SerenityAllocator", Environment, Outcome, '
        "Site) ispresent(MeteredQuotaClassifier)"
    )
    assert braced_problems(text) + query_problems(text) == []
