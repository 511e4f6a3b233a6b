"""The real-sized write workload of the bench: guards on the gate, the real worker behind them.

Counts only (refusals, stranded units, calls): the bench's numbers must mean what its tables
say, on the simulator over HTTP with a simulated clock.
"""

from __future__ import annotations

from typing import Any

from bench import double_carve
from bench.real_sizes import VARIANTS, gold_pool
from bench.write_workload import Request
from bench.writes_pools import PoolWrites, run, stranded


def _five_new_children_write_ten_each() -> PoolWrites:
    # The gold pool: 13 / 800 in all, 400 prompts free; two idle children carved 200 (30 used)
    base = gold_pool()
    requests = [Request(float(i), f"gold-busy-{i}", (10,), False) for i in range(5)]
    return PoolWrites("gold", base.title, "gold-pool", base.seed, requests)


def test_the_defaults_carve_a_gold_pool_exactly_where_blocks_drained_it() -> None:
    # Given five new children of a gold pool each writing one batch of 10 prompts
    pool = _five_new_children_write_ten_each()

    # When they write through their guards with the shipped defaults
    default = run(pool, VARIANTS["default"][1])

    # Then the pool is tight (400 free among ten children: a level of 39, under four blocks),
    # so each top-up is the exact 10: nobody is refused (100-prompt blocks took the 400 free in
    # four top-ups and refused the fifth), and one ensure served each request
    assert default["requests"] == 5
    assert default["org_pool_exhausted"] == default["requests_refused"] == 0
    assert default["ensures"] == 5 and default["ensures_pool_exhausted"] == 0
    assert default["outcomes"] == {"topped-up": 5}
    # And nothing is stranded in the children that wrote; the idle ones keep their 2 x 170
    assert default["stranded_active"] == {"projects": 0, "prompts": 0}
    assert default["stranded"] == {"projects": 2, "prompts": 340}
    # And each write waits out the gate's lag once (5 attempts); nothing dead-lettered
    assert default["write_attempts"] == 5 * 5
    assert default["dead_letters"] == 0


def test_stranded_counts_carved_minus_used_and_drafted_in_the_pools_children_only() -> None:
    def ws(ws_id: str, parent: str | None, prompts: dict[str, int]) -> dict[str, Any]:
        projects = {"used": 1, "total": 2}
        return {"id": ws_id, "parent_id": parent, "ai": {"projects": projects, "prompts": prompts}}

    workspaces = [
        ws("pool", None, {"used": 0, "total": 800}),
        ws("a", "pool", {"used": 30, "drafted": 20, "total": 100}),
        ws("b", "pool", {"used": 100, "total": 100}),
        ws("elsewhere", "other", {"used": 0, "total": 500}),
    ]

    assert stranded(workspaces, "pool") == {"projects": 2, "prompts": 50}


def test_the_double_carve_finding_shows_each_measured_pool_before_and_after() -> None:
    # Given the dev-like parent's run with the defaults (the gold pool did not run)
    after = {
        "label": "defaults",
        "requests": 12,
        "org_pool_exhausted": 0,
        "ensures": 15,
        "ensures_pool_exhausted": 0,
        "stranded": {"projects": 0, "prompts": 600},
        "calls_per_request": 6.5,
    }
    pools = {"dev": {"title": "dev-like parent", "variants": {"default": after}}}

    # Then its row pairs the numbers before the fix with the run's; no row for the rest
    rows = [line for line in double_carve.lines(pools) if line.startswith("| dev")]
    assert rows == [
        "| dev-like parent, defaults | 12 | 2 → 0 | 21 → 15 | 4 → 0 | 1 → 0 | 650 → 600 | "
        "7.167 → 6.5 |"
    ]
