"""Measurement: the shipped defaults against exact carving on a grid of pools, both modes.

Each pool of the grid is a write workload of :mod:`bench.writes_pools` (services writing
through their guards on the simulator's write gate, the real worker behind them, all on a
simulated clock), run with no setting changed in static and in IMS mode, beside the
reference :mod:`bench.exact_carving` on the same seed and requests. The grid:

- gold 13 / 800 with 4, 8 and 16 busy children plus two idle ones carved 200 the old way;
- the dev-like parent (0/2 projects, 0/1913 prompts, docs/benchmarks/real-sizes.md);
- an unmetered customer (200 projects);
- a large enterprise pool (5,800 prompts, 32 busy children with skewed demand, six idle);
- demand that grows (each request a little larger than the one before);
- a burst (40 requests arriving within two seconds on ten children).

The steady trickle and bursts of :mod:`bench.calls` give the Semrush calls per request in both
modes (the calls targets). :mod:`bench.pool_targets` turns the figures into verdicts.
"""

from __future__ import annotations

import random
from typing import Any

from serenity_tools.standins.simulator import start_simulator

from . import calls, exact_carving, pool_targets, writes_pools
from .common import BENCH_TOKEN, note
from .real_sizes import _ws
from .write_workload import Request
from .writes_pools import PoolWrites, _plan, customer_writes, dev_writes, gold_writes


def enterprise(requests: int = 160) -> PoolWrites:
    """60 projects / 5,800 prompts in all: six idle children carved 300 (40 used) the old way,
    32 busy ones starting empty with a project each, 4,000 prompts and 22 projects free;
    demand skewed (child i about 1/(i+1) of the requests), 1-2 batches of 5-40 prompts."""
    seed = [_ws("ent-pool", None, (22, 0), (4_000, 0))]
    seed += [_ws(f"ent-idle-{i}", "ent-pool", (1, 0), (300, 40)) for i in range(6)]
    busy = [f"ent-busy-{i:02d}" for i in range(32)]
    seed += [_ws(name, "ent-pool", (1, 1), (0, 0)) for name in busy]
    skewed = [name for i, name in enumerate(busy) for _ in range(max(1, 32 // (i + 1)))]
    plan = _plan(
        random.Random(24), skewed, requests, (5, 10, 20, 40), batches=2, project_share=0.05
    )
    title = "enterprise pool (60 / 5,800), 32 busy (skewed) + 6 idle children"
    return PoolWrites("enterprise", title, "ent-pool", seed, plan)


def growing(requests: int = 80, children: int = 6) -> PoolWrites:
    """10 projects / 1,500 prompts free, six children with a project each; request k writes
    one batch of 5 + k // 2 prompts, round-robin, ~1 s apart (about 2,000 asked in all)."""
    seed = [_ws("grow-pool", None, (10, 0), (1_500, 0))]
    names = [f"grow-{i}" for i in range(children)]
    seed += [_ws(name, "grow-pool", (1, 1), (0, 0)) for name in names]
    plan = [Request(float(k), names[k % children], (5 + k // 2,), False) for k in range(requests)]
    return PoolWrites("growing", "demand that grows (10 / 1,500 free)", "grow-pool", seed, plan)


def burst(requests: int = 40, children: int = 10) -> PoolWrites:
    """3 projects / 800 prompts free, ten children with a project each; 40 requests of 1-2
    batches of 5-20 prompts within two seconds (about 750 asked)."""
    seed = [_ws("burst-pool", None, (3, 0), (800, 0))]
    names = [f"burst-{i}" for i in range(children)]
    seed += [_ws(name, "burst-pool", (1, 1), (0, 0)) for name in names]
    rng = random.Random(25)
    plan = [
        Request(
            0.05 * k,
            rng.choice(names),
            tuple(rng.choice((5, 10, 15, 20)) for _ in range(rng.randint(1, 2))),
            False,
        )
        for k in range(requests)
    ]
    return PoolWrites("burst", "a burst (40 requests in 2 s, 800 free)", "burst-pool", seed, plan)


def grid() -> list[PoolWrites]:
    """Every pool of the grid, in the order the tables show them."""
    return [
        gold_writes(busy=4),
        gold_writes(busy=8),
        gold_writes(busy=16),
        dev_writes(),
        customer_writes(),
        enterprise(),
        growing(),
        burst(),
    ]


def _calls_side() -> dict[str, Any]:
    """Semrush calls per request on the steady trickle and bursts, static and IMS."""
    out: dict[str, Any] = {}
    with start_simulator(accepted_tokens=[BENCH_TOKEN]) as sim:
        for workload in (calls.trickle(), calls.bursts()):
            note(f"pool grid: calls, {workload.key} ({workload.requests} requests, 2 modes)")
            out[workload.key] = {
                mode: calls.run_ours(workload, sim, ims=mode == "ims").as_dict()[
                    "calls_per_request"
                ]
                for mode in ("static", "ims")
            }
    return out


def measure() -> dict[str, Any]:
    """Every pool in both modes beside the reference, the calls side, and the verdicts."""
    out: dict[str, Any] = {"pools": {}, "baseline": pool_targets.BASELINE}
    for pool in grid():
        note(f"pool grid: {pool.key} ({len(pool.requests)} requests, static and IMS)")
        out["pools"][pool.key] = {
            "title": pool.title,
            "reference": exact_carving.carve(pool.seed, pool.parent, pool.requests),
            "static": writes_pools.run(pool, {}),
            "ims": writes_pools.run(pool, {}, ims=True),
        }
    out["calls"] = _calls_side()
    out["verdicts"] = pool_targets.verdicts(out)
    return out


def _waits(waits: dict[str, Any]) -> str:
    return f"{waits['waited']} of {waits['writes']} (p95 {waits['waited_p95_s']:g} s)"


def _cell(label: str, n: dict[str, Any]) -> str:
    return (
        f"| {label} | {n['org_pool_exhausted']} | {n['writes_refused']} of {n['writes']} | "
        f"{n['stranded_active']['prompts']} / {n['stranded_active']['projects']} | "
        f"{n['calls_per_request']} | {_waits(n['waits'])} | {_waits(n['steady_waits'])} |"
    )


def pool_rows(cell: dict[str, Any]) -> list[str]:
    """One pool: the reference, the defaults in static mode, the defaults in IMS mode."""
    ref = cell["reference"]
    reference = (
        f"| exact carving (reference) | {ref['refused']} | {ref['writes_refused']} of "
        f"{ref['writes']} | {ref['stranded_active']['prompts']} / "
        f"{ref['stranded_active']['projects']} | — | — | — |"
    )
    return [
        f"{ref['requests']} requests, {ref['active_children']} active children.",
        "",
        "| allocator | requests refused orgPoolExhausted | writes refused | stranded in "
        "active children (prompts / projects) | Semrush calls/request | waited writes (all) "
        "| waited writes (steady state) |",
        "|" + " --- |" * 7,
        reference,
        _cell("defaults, static", cell["static"]),
        _cell("defaults, IMS", cell["ims"]),
    ]


def _baseline_rows(section: dict[str, Any]) -> list[str]:
    """The IMS cells at the baseline commit beside this run's."""
    base = section["baseline"]
    rows = [
        f"The defaults in IMS mode, at {base['commit']} → this run. The figures at "
        f"{base['commit']} were measured with the requests one after another on the clock; this "
        "run's side by side, so the waited writes and the calls are not like for like (more "
        "requests overlap on one child now, as they do in production):",
        "",
        "| pool | refused orgPoolExhausted | stranded prompts (active) | waited writes "
        "(steady state) | Semrush calls/request |",
        "|" + " --- |" * 5,
    ]
    for key, cell in section["pools"].items():
        then = base["pools"].get(key)
        if then is None:
            continue
        now = cell["ims"]
        steady = now["steady_waits"]
        rows.append(
            f"| {key} | {then[0]} → {now['org_pool_exhausted']} | "
            f"{then[1]} → {now['stranded_active']['prompts']} | {then[2]} of {then[3]} → "
            f"{steady['waited']} of {steady['writes']} | {then[4]} → {now['calls_per_request']} |"
        )
    return rows


def markdown(section: dict[str, Any]) -> str:
    """docs/benchmarks/pools.md from the section's numbers."""
    base = section["baseline"]
    lines = [
        "# The shipped defaults against exact carving, on a grid of pools",
        "",
        "Generated by `make bench` (`bench/pool_grid.py`, `bench/exact_carving.py`,",
        "`bench/pool_targets.py`; `python -m bench.run --only pools` runs this page alone).",
        "Each pool is a write workload: services write through `WriteGuard` on the simulator's",
        "write gate (its 9 s lag, a 1 s queue latency, all on a simulated clock), the guards'",
        "ensures served by the real handler with no setting changed, in static mode (one token)",
        "and in IMS mode (each ensure acting as its child's user, a promise minted per ensure).",
        "Requests run side by side (`bench/virtual_time.py`): each arrives on time and waits",
        "without holding up the others, and each queued ensure is served at its due time.",
        "",
        "**The reference, exact carving**: it knows each write as it arrives, carves exactly",
        "what the child lacks for it from what is free in the pool, and refuses only a write",
        "that cannot fit; it reclaims nothing (the idle children keep what they were carved),",
        "and it makes no Semrush calls and meets no lag (its columns are counts only).",
        "",
        "Refused = service requests whose write was refused at the end (the customer's 409)",
        "after the worker rejected one of its ensures `orgPoolExhausted`; stranded = total -",
        "used - drafted in the children that wrote, after the workload; Semrush calls = User",
        "Manager calls plus write-gate attempts (IMS calls apart); waited writes = writes that",
        "met the gate's lag (steady state: each child's first request left out, as its first",
        "top-up always meets the lag), p95 of their waits in simulated seconds. Waits are",
        "reported here, not judged: on a pool that is short, writes wait for units that are",
        "not there; the waits target is judged on the write workload, whose pool has room",
        "(writes.md). Stranded is judged only in a dimension the pool fell short in (the",
        "reference refused a write needing it): headroom in a dimension with room to spare",
        "strands nothing. Top-ups are sized by the pool (docs/decisions/0027-top-ups-sized-",
        "by-the-pool.md): these are the defaults, with no setting to tune per pool.",
        "",
        f"Run on commit {section.get('commit', 'see results.json meta')}.",
        "",
        "## Targets (defaults, IMS mode)",
        "",
        "| target | pool | figure | limit | verdict |",
        "|" + " --- |" * 5,
    ]
    for v in section["verdicts"]:
        verdict = "pass" if v["met"] else "**FAIL**"
        lines.append(f"| {v['target']} | {v['pool']} | {v['figure']} | {v['limit']} | {verdict} |")
    lines += [
        "",
        "Calls per request on `bench/calls.py`'s steady trickle and bursts (Semrush calls only),",
        f"against the shipped defaults at {base['commit']} (fixed figures, `BASELINE`):",
        "",
        "| workload | static now | static at baseline | IMS now | IMS at baseline |",
        "|" + " --- |" * 5,
    ]
    for key, now in section["calls"].items():
        then = base[key]
        lines.append(
            f"| {key} | {now['static']} | {then['static']} | {now['ims']} | {then['ims']} |"
        )
    lines += ["", *_baseline_rows(section), ""]
    for cell in section["pools"].values():
        lines += [f"## {cell['title']}", "", *pool_rows(cell), ""]
    return "\n".join(lines)


def summary_rows(section: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per target kind: met when every pool meets it."""
    rows = []
    for target in dict.fromkeys(v["target"] for v in section["verdicts"]):
        mine = [v for v in section["verdicts"] if v["target"] == target]
        failed = [v["pool"] for v in mine if not v["met"]]
        rows.append(
            {
                "measurement": f"9. Pool grid (IMS, defaults): {target}",
                "ours": f"{len(mine) - len(failed)} of {len(mine)} pass",
                "baseline": "exact carving / 244d50d",
                "ratio": "failing: " + ", ".join(failed) if failed else "all pass",
                "target": mine[0]["limit"] if len(mine) == 1 else "per pool (pools.md)",
                "met": not failed,
            }
        )
    return rows


def readme_lines(section: dict[str, Any] | None, missing: str) -> list[str]:
    """The README's section: a pointer to pools.md (``missing`` when the grid did not run)."""
    lines = ["## 9. The defaults against exact carving, on a grid of pools", ""]
    if section is None:
        return [*lines, missing]
    failed = [f"{v['target']} ({v['pool']})" for v in section["verdicts"] if not v["met"]]
    return [
        *lines,
        "Gold (4, 8, 16 busy), dev-like, unmetered customer, enterprise, growing demand and a",
        "burst, static and IMS, beside the exact-carving reference, with a verdict per target:",
        "[pools.md](pools.md). "
        + ("Every target passes." if not failed else "Failing: " + "; ".join(failed) + "."),
    ]
