"""Measurement: real-sized pools, and what the allocator costs while nothing is metered.

Real sizes (semrush-user-manager.md, "Child workspaces, and other read-side facts"): a gold-tier
pool holds 13 projects / 800 prompts, so eight 100-prompt blocks drain one; a dev parent read
0/2 projects and 0/1913 prompts; customer parents are unmetered (``limits_enabled: false``)
with about 200 projects, 0 used. Each pool gets a small seeded workload through the real
``lambda_handler`` (runtime from ``build_runtime(AllocatorSettings.from_env(env))``), fed by the
in-process FIFO model, against the simulator over HTTP at latency 0, exactly like the calls
measurement (:mod:`bench.calls`): the services write what each served ensure asked for.

Reported per pool and per variant (block size and switches): requests refused for
``orgPoolExhausted``, units stranded in the children after the workload (carved minus used,
per dimension), and upstream calls per request.

The dormant cost: the customer workload with the kill switch off, with it on under the
unmetered parent, and with it on under the same parent metered; upstream calls and handler
time per request (wall clock around ``lambda_handler``, so a ratio on this machine, never an
absolute Lambda figure).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.adapters.sqs import AllocationProducer, build_ensure
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import build_runtime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.simulator import SimulatorServer

from .calls import Round, Workload, _drive, _Ids
from .common import MAX_RECEIVE_COUNT, QUEUE_URL, RecordingEvents, allocator_env, note, silenced
from .fifo import FifoQueue, lambda_event
from .pool_writes_tables import markdown_lines

RECLAIM = {"SERENITY_SIBLING_RECLAIM": "true", "QUEUE_URL": QUEUE_URL}
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "switches_off": (
        "blocks 1/100, fallback off, reclaim off",
        {"SERENITY_TIGHT_POOL_FALLBACK": "false"},
    ),
    "default": ("blocks 1/100, fallback on (default), reclaim off", {}),
    "reclaim": ("blocks 1/100, fallback on, reclaim on", RECLAIM),
    "blocks_50": ("blocks 1/50, fallback on, reclaim on", {"BLOCK_PROMPTS": "50", **RECLAIM}),
    "blocks_25": ("blocks 1/25, fallback on, reclaim on", {"BLOCK_PROMPTS": "25", **RECLAIM}),
}
DORMANT: dict[str, tuple[str, dict[str, str], bool]] = {
    "switch_off": (
        "kill switch off (the default)",
        {"SERENITY_DYNAMIC_ALLOCATION": "false"},
        False,
    ),
    "unmetered": ("switch on, unmetered parent", {}, False),
    "metered": ("switch on, the same parent metered", {}, True),
}


def _ws(
    ws_id: str,
    parent: str | None,
    projects: tuple[int, int],
    prompts: tuple[int, int],
    *,
    metered: bool = True,
) -> dict[str, Any]:
    """A seed entry; ``projects``/``prompts`` are ``(total, used)``."""
    entry: dict[str, Any] = {
        "id": ws_id,
        "title": ws_id,
        "parent_id": parent,
        "ai": {
            "projects": {"total": projects[0], "used": projects[1]},
            "prompts": {"total": prompts[0], "used": prompts[1]},
        },
    }
    if parent is None:
        entry["limits_enabled"] = metered
    return entry


def _ensure(ids: _Ids, rng: random.Random, child: str, parent: str, needs: tuple[int, ...]) -> Any:
    need = {"projects": 1 if rng.random() < 0.1 else 0, "prompts": rng.choice(needs)}
    return build_ensure(child, parent, need, request_id=ids.next())


def gold_pool(busy: int = 8, idle: int = 2, rounds: int = 4) -> Workload:
    """13 projects / 800 prompts in all: two idle children carved 200 each the old way, eight
    busy ones starting empty and asking 5-20 prompts a round (about 400 in all, the pool's
    free 400). Busy children hold one project each while the 13 last (with 16 busy, five
    have none); the pool keeps the rest. Key ``gold`` for eight busy, ``gold_<busy>`` else."""
    rng, ids = random.Random(11), _Ids("gold")
    held = min(busy, 13 - idle)
    seed = [_ws("gold-pool", None, (13 - idle - held, 0), (800 - 200 * idle, 0))]
    seed += [_ws(f"gold-idle-{i}", "gold-pool", (1, 0), (200, 30)) for i in range(idle)]
    seed += [
        _ws(f"gold-busy-{i}", "gold-pool", (1, 1) if i < held else (0, 0), (0, 0))
        for i in range(busy)
    ]
    plan = [
        Round(
            [_ensure(ids, rng, f"gold-busy-{i}", "gold-pool", (5, 10, 15, 20)) for i in range(busy)]
        )
        for _ in range(rounds)
    ]
    key = "gold" if busy == 8 else f"gold_{busy}"
    title = f"gold pool (13 / 800), {busy} busy + {idle} idle children"
    return Workload(key, title, seed, plan)


def dev_parent(children: int = 3, rounds: int = 4) -> Workload:
    """The dev-like parent: 0/2 projects, 0/1913 prompts; three new children, each asking one
    project first (the third cannot have one), then 50-200 prompts a round."""
    rng, ids = random.Random(12), _Ids("dev")
    seed = [_ws("dev-parent", None, (2, 0), (1913, 0))]
    seed += [_ws(f"dev-child-{i}", "dev-parent", (0, 0), (0, 0)) for i in range(children)]
    first = [
        build_ensure(f"dev-child-{i}", "dev-parent", {"projects": 1}, request_id=ids.next())
        for i in range(children)
    ]
    later = [
        Round(
            [
                _ensure(ids, rng, f"dev-child-{i}", "dev-parent", (50, 100, 200))
                for i in range(children)
            ]
        )
        for _ in range(rounds - 1)
    ]
    return Workload(
        "dev", "dev-like parent (0/2 projects, 0/1913 prompts)", seed, [Round(first), *later]
    )


def customer_parent(children: int = 10, rounds: int = 4, *, metered: bool = False) -> Workload:
    """A customer parent: about 200 projects, 0 used, unmetered; ten children asking 10-40
    prompts a round. ``metered`` seeds the same parent metered, with prompts to carve."""
    rng, ids = random.Random(13), _Ids("customer")
    prompts = 10_000 if metered else 0
    seed = [_ws("customer-parent", None, (200, 0), (prompts, 0), metered=metered)]
    seed += [_ws(f"customer-{i:02d}", "customer-parent", (0, 0), (0, 0)) for i in range(children)]
    plan = [
        Round(
            [
                _ensure(ids, rng, f"customer-{i:02d}", "customer-parent", (10, 20, 30, 40))
                for i in range(children)
            ]
        )
        for _ in range(rounds)
    ]
    title = "customer parent (200 projects, " + ("metered)" if metered else "unmetered)")
    return Workload("customer", title, seed, plan)


def _stranded(sim: SimulatorServer, parent: str) -> dict[str, int]:
    """Units carved into the parent's children and not used: total - used, per dimension."""
    children = [w for w in sim.state.dump()["workspaces"] if w["parent_id"] == parent]
    return {
        dim: sum(max(0, w["ai"][dim]["total"] - w["ai"][dim]["used"]) for w in children)
        for dim in ("projects", "prompts")
    }


def run(workload: Workload, sim: SimulatorServer, overrides: dict[str, str]) -> dict[str, Any]:
    """One workload through the real handler; the refusals, stranded units, calls and time."""
    settings = AllocatorSettings.from_env(allocator_env(sim.origin, **overrides))
    runtime = build_runtime(settings)
    events = RecordingEvents()
    runtime.outcomes = OutcomePublisher("bench-outcomes", events=events)  # type: ignore[arg-type]
    fifo = FifoQueue(max_receive_count=MAX_RECEIVE_COUNT)
    if settings.sibling_reclaim:
        runtime.producer = AllocationProducer(QUEUE_URL, sqs=fifo)  # type: ignore[arg-type]
    codes: Counter[str] = Counter()
    handler_s = [0.0]

    def process(batch: list[Any], statuses: dict[str, str]) -> set[str]:
        started = time.perf_counter()
        with silenced():
            response = lambda_handler(
                lambda_event(batch), LocalLambdaContext("bench-allocator", 60.0), runtime
            )
        handler_s[0] += time.perf_counter() - started
        for outcome in events.outcomes:
            statuses[outcome["request_id"]] = outcome["status"]
            codes[outcome.get("error_code") or outcome["status"]] += 1
        events.outcomes.clear()
        return {f["itemIdentifier"] for f in response["batchItemFailures"]}

    result = _drive(workload, sim, fifo, process).as_dict()
    parent = workload.seed[0]["id"]
    return {
        "requests": result["requests"],
        "org_pool_exhausted": codes["orgPoolExhausted"],
        "served": result["served"],
        "writes_refused": result["writes_refused"],
        "stranded": _stranded(sim, parent),
        "calls": result["calls"],
        "calls_per_request": result["calls_per_request"],
        "handler_ms_per_request": round(1000.0 * handler_s[0] / result["requests"], 2),
        "statuses": result["statuses"],
        "units_conserved": result["units_conserved"],
    }


def measure(sim: SimulatorServer) -> dict[str, Any]:
    """Every real-sized pool under every variant, then the dormant cost."""
    out: dict[str, Any] = {"pools": {}, "dormant": {}}
    for workload in (gold_pool(), dev_parent(), customer_parent()):
        note(f"real sizes: {workload.key} ({workload.requests} requests, {len(VARIANTS)} variants)")
        variants = {
            key: {"label": label, **run(workload, sim, overrides)}
            for key, (label, overrides) in VARIANTS.items()
        }
        out["pools"][workload.key] = {"title": workload.title, "variants": variants}
    note("real sizes: dormant cost (customer workload, 3 ways)")
    for key, (label, overrides, metered) in DORMANT.items():
        out["dormant"][key] = {
            "label": label,
            **run(customer_parent(metered=metered), sim, overrides),
        }
    return out


def _pool_rows(pool: dict[str, Any]) -> list[str]:
    rows = [
        "| variant | requests | orgPoolExhausted | writes refused | stranded projects | "
        "stranded prompts | calls/request |",
        "|" + " --- |" * 7,
    ]
    for v in pool["variants"].values():
        rows.append(
            f"| {v['label']} | {v['requests']} | {v['org_pool_exhausted']} | "
            f"{v['writes_refused']} | {v['stranded']['projects']} | {v['stranded']['prompts']} | "
            f"{v['calls_per_request']} |"
        )
    return rows


def _dormant_rows(dormant: dict[str, Any]) -> list[str]:
    rows = [
        "| customer parent | requests | calls/request | handler ms/request | outcomes |",
        "|" + " --- |" * 5,
    ]
    for v in dormant.values():
        outcomes = ", ".join(f"{k} {n}" for k, n in v["statuses"].items())
        rows.append(
            f"| {v['label']} | {v['requests']} | {v['calls_per_request']} | "
            f"{v['handler_ms_per_request']} | {outcomes} |"
        )
    return rows


def markdown(section: dict[str, Any], writes: dict[str, Any] | None = None) -> str:
    """docs/benchmarks/real-sizes.md from the section's numbers (and the write workload's on
    the same pools, ``writes``: the writes section's ``real_sized_pools``)."""
    lines = [
        "# Real-sized pools, and the cost of staying dormant",
        "",
        "Generated by `make bench` (`bench/real_sizes.py`; see its docstring). Real handler,",
        "in-process FIFO model, simulator over HTTP at latency 0; the services write what each",
        "served ensure asked for. Stranded = carved into the pool's children minus used, after",
        "the workload (units the other children could not have).",
        "",
    ]
    for pool in section["pools"].values():
        lines += [f"## {pool['title']}", "", *_pool_rows(pool), ""]
    if writes:
        lines += markdown_lines(writes, heading="##", other="[writes.md](writes.md)")
    lines += [
        "## Dormant cost",
        "",
        "The customer workload three ways. Handler time is wall clock around `lambda_handler` on",
        "this machine (a ratio, not a Lambda bill).",
        "",
        *_dormant_rows(section["dormant"]),
        "",
        *dormant_lines(section["dormant"]),
        "",
        "The variants above are settings an operator could change; the shipped defaults are",
        "what every pool gets, and [pools.md](pools.md) measures them against exact carving on",
        "the grid of pools, in both credential modes.",
        "",
    ]
    return "\n".join(lines)


def dormant_lines(dormant: dict[str, Any]) -> list[str]:
    """The dormant cost in a sentence, with the numbers it rests on."""
    return [
        "Dormant: with the kill switch off an ensure costs "
        f"{dormant['switch_off']['calls_per_request']} upstream calls and "
        f"{dormant['switch_off']['handler_ms_per_request']} ms of handler time; switched on",
        "under an unmetered customer parent it costs "
        f"{dormant['unmetered']['calls_per_request']} calls (the child read, the parent's",
        "metering flag cached per container) and "
        f"{dormant['unmetered']['handler_ms_per_request']} ms; the same parent metered costs "
        f"{dormant['metered']['calls_per_request']} calls and "
        f"{dormant['metered']['handler_ms_per_request']} ms.",
    ]


def readme_lines(
    section: dict[str, Any] | None, writes_section: dict[str, Any] | None = None
) -> list[str]:
    """The README's section: a pointer to real-sizes.md and to the pool grid's page."""
    if section is None:
        return ["## 8. Real-sized pools", "", "Not measured in this run."]
    writes = (writes_section or {}).get("real_sized_pools")
    both = " and the write workload (guards on the gate, the real worker)" if writes else ""
    return [
        "## 8. Real-sized pools",
        "",
        "Gold (13 / 800), dev-like (0/2, 0/1913) and unmetered customer (200 projects) pools under",
        f"five block/switch variants in the calls workload{both}, and the dormant cost:",
        "[real-sizes.md](real-sizes.md). The shipped defaults against exact carving on the grid",
        "of pools: [pools.md](pools.md).",
    ]
