"""The pool grid's own logic: the exact-carving reference and the verdicts on its targets.

The reference is arithmetic over a seed (no simulator); the verdicts are pure functions of one
run's figures. One small pool runs through the real worker in IMS mode, as the grid does.
"""

from __future__ import annotations

from typing import Any

from bench import pool_targets
from bench.exact_carving import carve
from bench.pool_grid import burst, enterprise, grid
from bench.write_workload import Outcome, Request
from bench.writes import steady_wait_targets
from bench.writes_pools import PoolWrites, first_requests, run, waits


def _ws(ws_id: str, parent: str | None, projects: tuple[int, int], prompts: tuple[int, int]) -> Any:
    entry: dict[str, Any] = {
        "id": ws_id,
        "parent_id": parent,
        "ai": {
            "projects": {"total": projects[0], "used": projects[1]},
            "prompts": {"total": prompts[0], "used": prompts[1]},
        },
    }
    if parent is None:
        entry["limits_enabled"] = True
    return entry


def _pool(free_prompts: int, free_projects: int = 0) -> list[dict[str, Any]]:
    # A pool with a child holding 5 prompts of headroom and an idle child carved 200
    return [
        _ws("pool", None, (free_projects, 0), (free_prompts, 0)),
        _ws("a", "pool", (1, 1), (15, 10)),
        _ws("idle", "pool", (1, 0), (200, 0)),
    ]


def test_exact_carving_carves_only_the_lack_and_refuses_only_what_cannot_fit() -> None:
    # Given 30 free prompts and a child with 5 of headroom (the idle child's 200 not free)
    seed = _pool(free_prompts=30)
    requests = [
        Request(0.0, "a", (20,), False),  # lacks 15: carved, 15 left free
        Request(1.0, "a", (20,), False),  # lacks 20 > 15: refused, nothing carved
        Request(2.0, "a", (10, 5), False),  # lacks 10 then 5: both carved, 0 left
        Request(3.0, "a", (1,), False),  # lacks 1 > 0: refused
    ]

    # When exact carving serves them in arrival order
    result = carve(seed, "pool", requests)

    # Then only the two writes that could not fit are refused, nothing is left over, and the
    # pool fell short in prompts only
    assert result == {
        "requests": 4,
        "refused": 2,
        "writes": 5,
        "writes_refused": 2,
        "active_children": 1,
        "stranded_active": {"projects": 0, "prompts": 0},
        "short_dimensions": ["prompts"],
    }


def test_exact_carving_refuses_a_project_the_pool_does_not_have_and_an_unmetered_pool_nothing() -> (
    None
):
    # Given one free project and two children creating one each
    seed = _pool(free_prompts=0, free_projects=1)
    seed.append(_ws("b", "pool", (0, 0), (0, 0)))
    requests = [Request(0.0, "a", (), True), Request(1.0, "b", (), True)]

    # Then the second is refused; unmetered, neither is, and nothing is carved
    assert carve(seed, "pool", requests)["refused"] == 1
    seed[0]["limits_enabled"] = False
    unmetered = carve(seed, "pool", [*requests, Request(2.0, "b", (500,), False)])
    assert unmetered["refused"] == 0
    # (only child a's 5 prompts of headroom from before: nothing was carved)
    assert unmetered["stranded_active"] == {"projects": 0, "prompts": 5}


def test_exact_carving_counts_drafts_as_used_and_strands_only_the_active_childrens_headroom() -> (
    None
):
    # Given a child of 100 prompts, 60 used and 30 drafted (10 of headroom), and 0 free
    seed = _pool(free_prompts=0)
    seed[1]["ai"]["prompts"] = {"total": 100, "used": 60, "drafted": 30}

    # When it writes 4 (the idle child's 200 are not counted: it did not write)
    result = carve(seed, "pool", [Request(0.0, "a", (4,), False)])

    # Then the write fits in the headroom and 6 are left stranded in it
    assert result["refused"] == 0
    assert result["stranded_active"] == {"projects": 0, "prompts": 6}


def _figures(**overrides: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "requests": 100,
        "org_pool_exhausted": 0,
        "requests_refused": 0,
        "writes_refused": 0,
        "active_children": 4,
        "stranded_active": {"projects": 0, "prompts": 0},
        "steady_waits": {"writes": 100, "waited": 0, "waited_share": 0.0, "waited_p95_s": 0.0},
    }
    figures.update(overrides)
    return figures


def _reference(refused: int, writes_refused: int = 0) -> dict[str, Any]:
    return {"refused": refused, "writes_refused": writes_refused}


def test_the_refused_target_allows_the_reference_plus_one_or_two_percent() -> None:
    # 100 requests: 2 % is 2, above the floor of 1
    assert pool_targets.refused("p", _figures(org_pool_exhausted=5), _reference(3))["met"]
    assert not pool_targets.refused("p", _figures(org_pool_exhausted=6), _reference(3))["met"]
    # 10 requests: 2 % is 0.2, so the floor of 1 applies
    few = _figures(requests=10, org_pool_exhausted=2)
    assert not pool_targets.refused("p", few, _reference(0))["met"]
    assert pool_targets.refused("p", few, _reference(1))["met"]


def test_the_stranded_target_applies_only_where_the_pool_fell_short() -> None:
    # Four active children: 100 prompts and 4 projects at most once a request is refused, in
    # each dimension the reference refused a write for
    both = {"refused": 1, "short_dimensions": ["projects", "prompts"]}
    heavy = {"projects": 0, "prompts": 101}
    assert pool_targets.stranded("p", _figures(stranded_active=heavy), both)["met"]
    refused = _figures(requests_refused=1, stranded_active=heavy)
    assert not pool_targets.stranded("p", refused, both)["met"]
    at_limit = _figures(requests_refused=1, stranded_active={"projects": 4, "prompts": 100})
    assert pool_targets.stranded("p", at_limit, both)["met"]
    projects = _figures(requests_refused=1, stranded_active={"projects": 5, "prompts": 0})
    assert not pool_targets.stranded("p", projects, both)["met"]
    # A pool short of projects only: prompt headroom on a pool with room to spare is fine
    only_projects = {"refused": 1, "short_dimensions": ["projects"]}
    assert pool_targets.stranded("p", refused, only_projects)["met"]
    assert not pool_targets.stranded("p", projects, only_projects)["met"]


def test_the_write_workloads_waited_target_needs_both_the_share_and_the_p95() -> None:
    def met(waited: int, p95: float) -> tuple[bool, bool]:
        steady = {
            "writes": 100,
            "waited": waited,
            "waited_share": waited / 100,
            "waited_p95_s": p95,
        }
        targets = steady_wait_targets(steady)
        return targets["steady_waited_share_met"], targets["steady_waited_p95_met"]

    assert met(5, 9.0) == (True, True)
    assert met(6, 9.0) == (False, True)
    assert met(1, 12.0) == (True, False)


def test_writes_refused_count_against_room_only_when_the_reference_refused_none() -> None:
    assert not pool_targets.room("p", _figures(writes_refused=1), _reference(0))["met"]
    assert pool_targets.room("p", _figures(writes_refused=9), _reference(2, 3))["met"]
    assert pool_targets.room("p", _figures(), _reference(0))["met"]


def test_the_calls_targets_against_the_fixed_baseline() -> None:
    # Baseline (IMS): trickle 1.552, bursts 1.201
    def rows(trickle: float, bursts: float) -> list[bool]:
        workloads = {"trickle": {"ims": trickle}, "bursts": {"ims": bursts}}
        return [row["met"] for row in pool_targets.calls(workloads)]

    assert rows(1.94, 1.201) == [True, True]  # 1.25 x 1.552 = 1.94
    assert rows(1.941, 1.202) == [False, False]


def test_verdicts_judge_every_pool_in_ims_mode_then_the_calls() -> None:
    section = {
        "pools": {
            "a": {"ims": _figures(org_pool_exhausted=9), "reference": _reference(0)},
            "b": {"ims": _figures(), "reference": _reference(0)},
        },
        "calls": {"trickle": {"ims": 1.0}, "bursts": {"ims": 1.0}},
    }

    rows = pool_targets.verdicts(section)

    assert [(r["target"], r["pool"]) for r in rows if not r["met"]] == [("refused", "a")]
    assert len(rows) == 2 * 3 + 2  # refused, stranded, room per pool; the two calls targets


def test_steady_state_waits_leave_each_childs_first_request_out() -> None:
    requests = [Request(float(i), child, (10,), False) for i, child in enumerate("abab")]
    assert first_requests(requests) == {0, 1}
    outcomes = [Outcome(False, 0.0), Outcome(False, 12.0), Outcome(True, 3.0)]
    assert waits(outcomes) == {
        "writes": 3,
        "waited": 2,
        "waited_share": 0.667,
        "waited_p95_s": 12.0,
    }


def test_the_grid_holds_every_pool_the_issue_names() -> None:
    keys = [pool.key for pool in grid()]
    assert keys == [
        "gold_4",
        "gold",
        "gold_16",
        "dev",
        "customer",
        "enterprise",
        "growing",
        "burst",
    ]
    big = enterprise()
    assert len({r.child for r in big.requests}) >= 25
    assert sum(w["ai"]["prompts"]["total"] for w in big.seed) >= 5_000
    assert max(r.at for r in burst().requests) < 2.0


def test_a_pool_in_ims_mode_is_served_as_each_childs_user() -> None:
    # Given two new children of a pool with 100 free prompts writing 10 each
    seed = [
        _ws("pool", None, (0, 0), (100, 0)),
        _ws("a", "pool", (1, 1), (0, 0)),
        _ws("b", "pool", (1, 1), (0, 0)),
    ]
    pool = PoolWrites("small", "small", "pool", seed, [Request(0.0, "a", (10,), False)])

    # When it runs in both modes
    static, ims = run(pool, {}), run(pool, {}, ims=True)

    # Then both serve the write; in IMS mode each ensure was minted a promise and exchanged
    assert static["writes_refused"] == ims["writes_refused"] == 0
    assert ims["mints_per_request"] == ims["ensures"] == 1
    assert ims["ims_refused"] == 0
    assert "mints_per_request" not in static
