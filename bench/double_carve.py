"""The real-sized write workload's double-carve finding, before and after its fix (ADR 0019).

Before, a write that met the disguised 405 sent its own ensure although its request's front had
already asked for the same units; both reached the worker in one batch and coalescing summed
them. The numbers before are constants: the same workload and variants, each guard given the
outcome lookup as now, measured on the guard of commit da4c96c (it sent the second ensure; the
refusals and stranded units are those the retries-only guard of that commit published too).
The numbers after come from the run.
"""

from __future__ import annotations

from typing import Any

BEFORE: dict[tuple[str, str], dict[str, Any]] = {
    ("dev", "default"): {
        "org_pool_exhausted": 2,
        "ensures": 21,
        "ensures_pool_exhausted": 4,
        "stranded": {"projects": 1, "prompts": 650},
        "calls_per_request": 7.167,
    },
    ("dev", "blocks_25"): {
        "org_pool_exhausted": 1,
        "ensures": 21,
        "ensures_pool_exhausted": 2,
        "stranded": {"projects": 0, "prompts": 500},
        "calls_per_request": 8.75,
    },
    ("gold", "default"): {
        "org_pool_exhausted": 18,
        "ensures": 72,
        "ensures_pool_exhausted": 50,
        "stranded": {"projects": 3, "prompts": 400},
        "calls_per_request": 8.425,
    },
    ("gold", "blocks_25"): {
        "org_pool_exhausted": 4,
        "ensures": 59,
        "ensures_pool_exhausted": 16,
        "stranded": {"projects": 3, "prompts": 110},
        "calls_per_request": 10.7,
    },
}
"""(pool, variant) -> the numbers before the fix, in the run's own keys."""


def _pair(before: Any, after: Any) -> str:
    return f"{before} → {after}"


def lines(pools: dict[str, Any]) -> list[str]:
    """The finding's paragraph and its before/after table (rows for the pools that ran)."""
    out = [
        "**Fixed (ADR 0019): a write's front and its recovery ensure were summed.** Coalescing",
        "sums the ensures of a batch (each stands for a write), but the guard's recovery asked",
        "again for the units its request's front had asked for; both nearly always reached the",
        "worker in one batch (the recovery leaves within the front's queue latency), so the",
        "child was carved twice the need (on the dev-like parent the first child took both",
        "projects for one write and the second child's project was refused). A guard with an",
        "outcome lookup now waits on its pending front instead, and sends its own ensure only",
        "once the front is applied and the gate's lag is over, or refused for more units than",
        "the write needs. Before → after, the same workload, each guard with the lookup:",
        "",
        "| pool, variant | requests | refused orgPoolExhausted | ensures | ensures "
        "orgPoolExhausted | stranded projects | stranded prompts | calls/request |",
        "|" + " --- |" * 8,
    ]
    for (pool_key, variant_key), before in BEFORE.items():
        pool = pools.get(pool_key)
        after = pool["variants"].get(variant_key) if pool else None
        if after is None:
            continue
        out.append(
            f"| {pool['title']}, {after['label']} | {after['requests']} | "
            f"{_pair(before['org_pool_exhausted'], after['org_pool_exhausted'])} | "
            f"{_pair(before['ensures'], after['ensures'])} | "
            f"{_pair(before['ensures_pool_exhausted'], after['ensures_pool_exhausted'])} | "
            f"{_pair(before['stranded']['projects'], after['stranded']['projects'])} | "
            f"{_pair(before['stranded']['prompts'], after['stranded']['prompts'])} | "
            f"{_pair(before['calls_per_request'], after['calls_per_request'])} |"
        )
    return [*out, ""]
