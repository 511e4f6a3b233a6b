"""The reference the pool grid measures the allocator against: exact carving in arrival order.

An allocator that knows each write as it arrives, carves exactly what the child lacks for it
from what is free in the pool (the master's total minus its used), and refuses only a write
that cannot fit. Units carved into other children before the workload (the idle children the
old way) stay theirs: the reference reclaims nothing, so it is what a pool can give without
moving anyone else's quota. An unmetered pool (``limits_enabled: false``) refuses nothing and
carves nothing. No Semrush, no lag: pure arithmetic over the seed the workload starts from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .write_workload import Request

DIMENSIONS = ("projects", "prompts")


@dataclass
class _Child:
    total: dict[str, int]
    used: dict[str, int]

    def headroom(self, dim: str) -> int:
        return max(0, self.total[dim] - self.used[dim])


@dataclass
class ExactCarving:
    """The pool's free units and its children's totals, as exact carving leaves them."""

    free: dict[str, int]
    metered: bool
    children: dict[str, _Child] = field(default_factory=dict)

    @classmethod
    def from_seed(cls, seed: Sequence[Mapping[str, Any]], parent: str) -> ExactCarving:
        """The pool and its children from a simulator seed (used + drafted count as used)."""
        pool = next(w for w in seed if w["id"] == parent)
        carving = cls(
            free={d: pool["ai"][d]["total"] - pool["ai"][d].get("used", 0) for d in DIMENSIONS},
            metered=bool(pool.get("limits_enabled", True)),
        )
        for w in seed:
            if w.get("parent_id") == parent:
                ai = w["ai"]
                carving.children[w["id"]] = _Child(
                    {d: ai[d]["total"] for d in DIMENSIONS},
                    {d: ai[d]["used"] + ai[d].get("drafted", 0) for d in DIMENSIONS},
                )
        return carving

    def write(self, child_id: str, need: Mapping[str, int]) -> bool:
        """One write: carve what the child lacks for ``need``; False when it cannot fit."""
        child = self.children[child_id]
        if self.metered:
            lack = {d: max(0, need.get(d, 0) - child.headroom(d)) for d in DIMENSIONS}
            if any(lack[d] > self.free[d] for d in DIMENSIONS):
                return False
            for d in DIMENSIONS:
                self.free[d] -= lack[d]
                child.total[d] += lack[d]
        for d in DIMENSIONS:
            child.used[d] += need.get(d, 0)
        return True

    def stranded(self, only: set[str]) -> dict[str, int]:
        """Units carved into the ``only`` children and not used."""
        return {d: sum(self.children[c].headroom(d) for c in only) for d in DIMENSIONS}


def needs(request: Request) -> list[dict[str, int]]:
    """A request's writes, as the guards write them: one project, or each prompt batch."""
    if request.project:
        return [{"projects": 1}]
    return [{"prompts": n} for n in request.prompts]


def carve(
    seed: Sequence[Mapping[str, Any]], parent: str, requests: Sequence[Request]
) -> dict[str, Any]:
    """The workload under exact carving: refused requests and writes, stranded units, and the
    dimensions the pool fell short in (a write needing them refused)."""
    carving = ExactCarving.from_seed(seed, parent)
    refused_requests = writes = refused_writes = 0
    short: set[str] = set()
    for request in requests:
        refused = []
        for need in needs(request):
            refused.append(not carving.write(request.child, need))
            if refused[-1]:
                short |= {d for d in DIMENSIONS if need.get(d, 0)}
        writes += len(refused)
        refused_writes += sum(refused)
        refused_requests += any(refused)
    active = {r.child for r in requests}
    return {
        "requests": len(requests),
        "refused": refused_requests,
        "writes": writes,
        "writes_refused": refused_writes,
        "active_children": len(active),
        "stranded_active": carving.stranded(active),
        "short_dimensions": sorted(short),
    }
