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


def test_default_blocks_drain_a_gold_pool_and_reclaim_serves_the_request_they_refuse() -> None:
    # Given five new children of a gold pool each writing one batch of 10 prompts
    pool = _five_new_children_write_ten_each()

    # When they write through their guards, with the defaults and with reclaim switched on
    default = run(pool, VARIANTS["default"][1])
    reclaim = run(pool, VARIANTS["reclaim"][1])

    # Then with 100-prompt blocks four top-ups take the 400 free prompts and the fifth
    # request is refused for orgPoolExhausted (its front rejected: its recovery waited on the
    # front and asked for nothing more, so each request sent one ensure)
    assert default["requests"] == 5
    assert default["org_pool_exhausted"] == 1
    assert default["requests_refused"] == 1
    assert default["ensures_pool_exhausted"] == 1
    assert default["ensures"] == reclaim["ensures"] == 5
    # And 4 x 90 carved and unused in the busy children, 2 x 170 in the idle ones
    assert default["stranded"] == {"projects": 2, "prompts": 700}
    # And with reclaim the idle children hand back all but a block each and nobody is refused
    assert reclaim["org_pool_exhausted"] == 0
    assert reclaim["requests_refused"] == 0
    assert reclaim["outcomes"]["topped-up-after-reclaim"] == 1
    assert reclaim["stranded"] == {"projects": 2, "prompts": 590}
    # And the park and the releases cost User Manager calls; each served write waits out the
    # gate's lag (5 attempts), the refused one stops at the refusal its lookup reads (2)
    assert reclaim["user_manager_calls"] > default["user_manager_calls"]
    assert (default["write_attempts"], reclaim["write_attempts"]) == (4 * 5 + 2, 5 * 5)
    assert default["dead_letters"] == reclaim["dead_letters"] == 0


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
