"""Children in the simulator's seed shape, by kind (shared by the demo and the harness)."""

from __future__ import annotations

import random
from typing import Any

_FIXED_USAGE: dict[str, tuple[tuple[int, int], tuple[int, int, int]]] = {
    # kind: ((projects used, total), (prompts used, total, drafted))
    "tight": ((2, 2), (300, 300, 0)),
    "idle": ((0, 3), (0, 1000, 0)),
    "drafts": ((1, 2), (200, 400, 150)),
    "ceiling": ((1, 1), (500, 500, 0)),
    "burst": ((1, 1), (200, 200, 0)),
}
_SMALL_TIGHT = ((1, 1), (100, 100, 0))
"""``zombie``, ``greedy`` and any other kind: small and tight."""


def usage(used: int, total: int, drafted: int = 0) -> dict[str, int]:
    """One dimension's usage in the simulator's seed shape."""
    return {"used": used, "drafted": drafted, "total": total}


def seed_child(child_id: str, kind: str, parent_id: str, rng: random.Random) -> dict[str, Any]:
    """One child of ``kind`` in the simulator's seed shape (the demo's and the harness's kinds).

    ``over``: carved the old way (totals far above use); ``tight``: used == total; ``idle``:
    nothing used; ``drafts``: pending drafts; ``ceiling``: at its brand ceiling; ``burst``:
    tight, for a coalescable burst; ``zombie``: stuck ``not ready``; anything else: small
    and tight (``greedy``).
    """
    if kind == "over":  # carved the old way: totals far above what is used
        projects = usage(rng.randint(1, 2), 6)
        prompts = usage(rng.choice((100, 150, 200, 250, 300)), 2500)
    else:
        (p_used, p_total), (q_used, q_total, drafted) = _FIXED_USAGE.get(kind, _SMALL_TIGHT)
        projects, prompts = usage(p_used, p_total), usage(q_used, q_total, drafted)
    return {
        "id": child_id,
        "title": f"{kind} brand {child_id[-2:]}",
        "parent_id": parent_id,
        "status": "not ready" if kind == "zombie" else "created",
        "ai": {"projects": projects, "prompts": prompts},
    }
