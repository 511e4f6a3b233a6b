"""The seeded org (three pools) and the workload the services send."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serenity_allocator.adapters.sqs import build_ensure, build_release
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest
from serenity_tools.verification.seeding import seed_child, usage

MAIN_POOL = "org-main"
UNMETERED_POOL = "org-unmetered"
TIGHT_POOL = "org-tight"
MIN_CHILDREN = 12
_MAIN_KINDS = (
    "over",
    "tight",
    "burst",
    "over",
    "tight",
    "drafts",
    "idle",
    "tight",
    "over",
    "ceiling",
)
_ACTIVE_KINDS = frozenset({"over", "tight", "burst", "drafts", "unmetered"})
SWEPT_KINDS = frozenset({"over", "idle", "donor", "drafts"})
"""Kinds holding at least a block of surplus (drafts: one project; their drafted prompts
count as used), so the ones a sweep enqueues a release for."""
_BURST_UNIT = 8

Request = EnsureRequest | ReleaseRequest


@dataclass(frozen=True)
class Org:
    """The seeded workspaces and what each child is for.

    Attributes:
        workspaces: Masters and children in the simulator's seed shape.
        kinds: Child id -> kind (``over``, ``tight``, ``burst``, ``drafts``, ``idle``,
            ``ceiling``, ``zombie``, ``unmetered``, ``pool-tight``, ``donor``).
        parents: Child id -> master id.
    """

    workspaces: tuple[dict[str, Any], ...]
    kinds: Mapping[str, str]
    parents: Mapping[str, str]

    @property
    def masters(self) -> tuple[str, ...]:
        """The master ids, in seed order."""
        return tuple(w["id"] for w in self.workspaces if w.get("parent_id") is None)

    def children_of(self, kind: str) -> list[str]:
        """The children of one kind, in seed order."""
        return [child for child, k in self.kinds.items() if k == kind]


_SEEDED_LIKE = {"unmetered": "tight", "pool-tight": "tight", "donor": "idle"}
"""The harness's own kinds, seeded like one of the demo's (:func:`.demo.seed_child`)."""


def _child_seed(child_id: str, kind: str, parent_id: str, rng: random.Random) -> dict[str, Any]:
    seeded = seed_child(child_id, _SEEDED_LIKE.get(kind, kind), parent_id, rng)
    return {**seeded, "title": f"{kind} brand {child_id}"}


def _pool_plan(children: int, tight_pool: bool, zombie: bool) -> list[tuple[str, str]]:
    """(pool, kind) of each child, in seed order."""
    unmetered = max(1, children // 20)
    tight_active = max(2, children // 20) if tight_pool else 0
    donors = max(3, tight_active // 2) if tight_pool else 0
    main = children - unmetered - tight_active - donors
    plan = [
        *((MAIN_POOL, _MAIN_KINDS[i % len(_MAIN_KINDS)]) for i in range(main)),
        *((UNMETERED_POOL, "unmetered") for _ in range(unmetered)),
        *((TIGHT_POOL, "pool-tight") for _ in range(tight_active)),
        *((TIGHT_POOL, "donor") for _ in range(donors)),
    ]
    if zombie:
        plan[0] = (MAIN_POOL, "zombie")
    return plan


def _masters(active_main: int, tight_pool: bool) -> list[dict[str, Any]]:
    """The pools: roomy metered, unmetered, and (optionally) tight."""
    masters: list[dict[str, Any]] = [
        {
            "id": MAIN_POOL,
            "title": "Harness org (roomy)",
            "parent_id": None,
            "limits_enabled": True,
            # Room for every child's worst case (a coalesced burst of 8 x 100 included).
            "ai": {
                "projects": usage(0, 3 * active_main + 20),
                "prompts": usage(0, 1000 * active_main + 5000),
            },
        },
        {
            "id": UNMETERED_POOL,
            "title": "Harness org (unmetered)",
            "parent_id": None,
            "limits_enabled": False,
            "ai": {"projects": usage(0, 100), "prompts": usage(0, 10_000)},
        },
    ]
    if tight_pool:
        # 130 free prompts: a first top-up of 120 fits only unrounded (the fallback), the rest
        # exhaust the pool until the donors' surplus comes back through sibling reclaim.
        masters.append(
            {
                "id": TIGHT_POOL,
                "title": "Harness org (tight)",
                "parent_id": None,
                "limits_enabled": True,
                "ai": {"projects": usage(0, 10), "prompts": usage(100, 230)},
            }
        )
    return masters


def plan_org(
    children: int, rng: random.Random, *, tight_pool: bool = True, zombie: bool = False
) -> Org:
    """Seed three pools: roomy metered, unmetered, and (optionally) tight with idle donors.

    Args:
        children: Total children over the pools (at least :data:`MIN_CHILDREN`).
        rng: Source of the usage draws.
        tight_pool: Include the tight pool (exercises the fallback, sibling reclaim and the
            early warning; its parked ensures come back after the local retry delay).
        zombie: Make one child of the main pool a zombie stuck ``not ready``.
    """
    plan = _pool_plan(children, tight_pool, zombie)
    kinds: dict[str, str] = {}
    parents: dict[str, str] = {}
    seeded: list[dict[str, Any]] = []
    for index, (parent, kind) in enumerate(plan):
        child_id = f"c{index:04d}"
        kinds[child_id], parents[child_id] = kind, parent
        seeded.append(_child_seed(child_id, kind, parent, rng))
    active_main = sum(1 for c, k in kinds.items() if parents[c] == MAIN_POOL and k != "idle")
    masters = _masters(active_main, tight_pool)
    return Org(tuple([*masters, *seeded]), kinds, parents)


@dataclass(frozen=True)
class Workload:
    """The org, and what the services send, as send units in global order.

    A unit is sent with one SendMessageBatch call: a burst's ensures travel together (and can
    coalesce); every other unit holds one request.
    """

    org: Org
    units: tuple[tuple[Request, ...], ...]

    @property
    def requests(self) -> list[Request]:
        """Every request, in send order (per child, its enqueue order)."""
        return [request for unit in self.units for request in unit]

    @property
    def plans(self) -> dict[str, list[Request]]:
        """Per child, its requests in enqueue order."""
        plans: dict[str, list[Request]] = defaultdict(list)
        for request in self.requests:
            plans[request.workspace_id].append(request)
        return dict(plans)


def _ensure(child: str, parent: str, prompts: int, projects: int = 0, **extra: Any) -> Request:
    return build_ensure(child, parent, {"projects": projects, "prompts": prompts}, **extra)


def _child_sequence(
    child: str, kind: str, parent: str, count: int, rng: random.Random
) -> list[Request]:
    if kind == "burst":
        return [_ensure(child, parent, rng.choice((50, 100))) for _ in range(count)]
    sequence: list[Request] = []
    for index in range(count):
        # Releases only BETWEEN ensures: each child's last request is an ensure, so the write
        # it prepared for is checked after the drain (a later release would rightly undo it).
        between = 0 < index < count - 1 and isinstance(sequence[-1], EnsureRequest)
        if between and rng.random() < 0.3:
            sequence.append(build_release(child))
            continue
        sequence.append(
            _ensure(
                child,
                parent,
                rng.choice((0, 50, 100, 150, 250)),
                rng.choice((0, 0, 1)),
                include_drafted=kind == "drafts" and rng.random() < 0.5,
            )
        )
    return sequence


def plan_workload(
    children: int,
    requests: int,
    rng: random.Random,
    *,
    tight_pool: bool = True,
    zombie: bool = False,
) -> Workload:
    """The org and about ``requests`` requests over its active children, in send order.

    Tight-pool children get two ensures each, ceiling children one (past their ceiling), the
    zombie two; the rest is spread over the roomy and unmetered children.
    """
    org = plan_org(children, rng, tight_pool=tight_pool, zombie=zombie)
    plans = _fixed_plans(org, rng)
    active = [c for c, kind in org.kinds.items() if kind in _ACTIVE_KINDS]
    budget = max(0, requests - sum(map(len, plans.values())))
    counts = Counter({child: budget // len(active) for child in active})
    for child in rng.sample(active, budget % len(active)):
        counts[child] += 1
    for child in active:
        if counts[child]:
            plans[child] = _child_sequence(
                child, org.kinds[child], org.parents[child], counts[child], rng
            )
    return Workload(org, _round_robin(org, plans, rng))


def _fixed_plans(org: Org, rng: random.Random) -> dict[str, list[Request]]:
    """The children whose requests are fixed by their kind: tight pool, ceiling, zombie."""
    plans: dict[str, list[Request]] = {}
    for child in org.children_of("pool-tight"):
        plans[child] = [_ensure(child, TIGHT_POOL, rng.choice((120, 150, 230))) for _ in range(2)]
    for child in org.children_of("ceiling"):
        ceiling = {"projects": 5, "prompts": 600}
        plans[child] = [_ensure(child, MAIN_POOL, 300, ceiling=ceiling)]
    for child in org.children_of("zombie"):
        plans[child] = [_ensure(child, MAIN_POOL, 50), _ensure(child, MAIN_POOL, 100)]
    return plans


def _units_of(requests: list[Request], is_burst: bool) -> list[tuple[Request, ...]]:
    if not is_burst:
        return [(request,) for request in requests]
    return [tuple(requests[i : i + _BURST_UNIT]) for i in range(0, len(requests), _BURST_UNIT)]


def _round_robin(
    org: Org, plans: Mapping[str, list[Request]], rng: random.Random
) -> tuple[tuple[Request, ...], ...]:
    """Send units round-robin over the children, each child's in its plan's order.

    The tight pool goes first, so its parks start early.
    """
    order = [c for c in plans if org.kinds[c] == "pool-tight"]
    rest = [c for c in plans if org.kinds[c] != "pool-tight"]
    rng.shuffle(rest)
    pending = {
        child: _units_of(plans[child], org.kinds[child] == "burst") for child in [*order, *rest]
    }
    units: list[tuple[Request, ...]] = []
    while any(pending.values()):
        for queue in pending.values():
            if queue:
                units.append(queue.pop(0))
    return tuple(units)
