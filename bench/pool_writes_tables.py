"""The real-sized pools' write workload as markdown: writes.md and real-sizes.md both show it.

The numbers come from :func:`bench.writes_pools.measure`; this module only renders them, so
either page's report can include the tables without importing the measurement.
"""

from __future__ import annotations

from typing import Any

from . import double_carve


def table(pool: dict[str, Any]) -> list[str]:
    """One pool's variants as a markdown table."""
    rows = [
        "| variant | requests | refused orgPoolExhausted | refused (all) | ensures | ensures "
        "orgPoolExhausted | stranded projects | stranded prompts | calls/request | User "
        "Manager calls/request |",
        "|" + " --- |" * 10,
    ]
    for v in pool["variants"].values():
        rows.append(
            f"| {v['label']} | {v['requests']} | {v['org_pool_exhausted']} | "
            f"{v['requests_refused']} | {v['ensures']} | {v['ensures_pool_exhausted']} | "
            f"{v['stranded']['projects']} | {v['stranded']['prompts']} | "
            f"{v['calls_per_request']} | {v['user_manager_calls_per_request']} |"
        )
    return rows


def markdown_lines(pools: dict[str, Any], *, heading: str, other: str) -> list[str]:
    """The pools' tables under one ``heading``-level title (writes.md and real-sizes.md;
    ``other`` links the page with the rest)."""
    lines = [
        f"{heading} The write workload on the real-sized pools",
        "",
        "Services write through `WriteGuard` on the simulator's write gate (its 9 s lag, each",
        "guard given the outcome lookup, a 1 s queue latency, requests side by side on a",
        "simulated clock); the",
        "guards' ensures go through the real producer and the FIFO model to the real handler",
        f"under each variant (`bench/writes_pools.py`; the rest: {other}). Refused = service",
        "requests whose write was refused at the end (the customer's 409), orgPoolExhausted",
        "when the worker rejected one of its ensures so; ensures = the guards' fronts and",
        "recoveries; stranded = total - used - drafted in the children after the workload;",
        "calls = User Manager calls plus write-gate attempts (up to five per write: the 9 s lag",
        "outlasts the first attempts after a top-up; a refusal the lookup reads ends a write's",
        "attempts at once), so the User Manager column is the allocator's own cost.",
        "",
    ]
    lines += double_carve.lines(pools)
    for pool in pools.values():
        lines += [f"{heading}# {pool['title']}", "", *table(pool), ""]
    return lines
