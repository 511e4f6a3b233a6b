"""Tiered prompt workspaces in a local run: the family, its requests, and the check.

Facts (semrush-user-manager.md, "The tiered prompt shape"): some workspaces answer with
``daily_prompts`` + ``weekly_prompts`` and no ``prompts``; the allocator must never send one a
flat ``prompts`` transfer, and never carve prompts from such a pool. The family here has one
of each case beside the synthetic pools of the demo and the harness:

- ``tiered-roomy`` (tiered child of a flat pool): a need both tiers cover -> ``hot-path``;
- ``tiered-short``: a need past the daily tier -> ``rejected / tieredPrompts`` (first receive);
- ``tiered-projects``: one more project -> ``topped-up`` with a projects-only transfer, then a
  release (projects only, its prompts never lowered);
- ``tiered-pool-child`` (flat child of a tiered pool): a prompts need -> ``tieredPrompts``.

The check: each request ended as expected, and the simulator's ``flat_prompts_to_tiered``
counter stayed 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.producer import build_ensure, build_release
from serenity_tools.verification.invariants import InvariantResult, invariant_result

Request = Any
"""An ``EnsureRequest`` or ``ReleaseRequest`` (the producer's builders)."""

FLAT_POOL = "tiered-org-flat-pool"
TIERED_POOL = "tiered-org-tiered-pool"
TIERED_IDS = frozenset(
    {FLAT_POOL, TIERED_POOL, "tiered-roomy", "tiered-short", "tiered-projects", "tiered-pool-child"}
)


def _tiers(projects: tuple[int, int], daily: tuple[int, int], weekly: tuple[int, int]) -> Any:
    return {
        "projects": {"used": projects[0], "total": projects[1]},
        "daily_prompts": {"used": daily[0], "total": daily[1]},
        "weekly_prompts": {"used": weekly[0], "total": weekly[1]},
    }


def _flat(projects: tuple[int, int], prompts: tuple[int, int]) -> Any:
    return {
        "projects": {"used": projects[0], "total": projects[1]},
        "prompts": {"used": prompts[0], "total": prompts[1]},
    }


def tiered_family() -> list[dict[str, Any]]:
    """The two pools and four children, in the simulator's seed shape (tiered where tiered)."""

    def child(child_id: str, parent: str, ai: Any) -> dict[str, Any]:
        return {"id": child_id, "title": f"tiered case {child_id}", "parent_id": parent, "ai": ai}

    return [
        {"id": FLAT_POOL, "title": "Tiered org (flat pool)", "ai": _flat((0, 13), (0, 800))},
        {
            "id": TIERED_POOL,
            "title": "Tiered org (tiered pool)",
            "ai": _tiers((0, 13), (0, 800), (0, 800)),
        },
        child("tiered-roomy", FLAT_POOL, _tiers((1, 1), (10, 100), (40, 500))),
        child("tiered-short", FLAT_POOL, _tiers((1, 1), (95, 100), (95, 500))),
        child("tiered-projects", FLAT_POOL, _tiers((1, 1), (0, 100), (0, 500))),
        child("tiered-pool-child", TIERED_POOL, _flat((1, 1), (100, 100))),
    ]


def tiered_requests() -> list[tuple[Request, tuple[str, str | None]]]:
    """The requests, in enqueue order, each with its expected ``(status, error_code)``."""
    return [
        (build_ensure("tiered-roomy", FLAT_POOL, {"prompts": 50}), ("hot-path", None)),
        (build_ensure("tiered-short", FLAT_POOL, {"prompts": 10}), ("rejected", "tieredPrompts")),
        (build_ensure("tiered-projects", FLAT_POOL, {"projects": 1}), ("topped-up", None)),
        (build_release("tiered-projects"), ("released", None)),
        (
            build_ensure("tiered-pool-child", TIERED_POOL, {"prompts": 1}),
            ("rejected", "tieredPrompts"),
        ),
    ]


def check_tiered(
    expected: Iterable[tuple[Request, tuple[str, str | None]]],
    outcomes: Iterable[AllocationOutcome],
    dump: Mapping[str, Any],
) -> InvariantResult:
    """Every tiered request ended as expected; no flat ``prompts`` reached a tiered workspace."""
    first: dict[str, AllocationOutcome] = {}
    for outcome in outcomes:
        first.setdefault(outcome.request_id, outcome)
    violations: list[str] = []
    cases = list(expected)
    for request, (status, code) in cases:
        got = first.get(request.request_id)
        seen = None if got is None else (got.status, got.error_code)
        if seen != (status, code) or (got is not None and got.receive_count != 1):
            violations.append(f"{request.workspace_id}: expected {status}/{code}, got {seen}")
    flat = int(dump.get("violations", {}).get("flat_prompts_to_tiered", 0))
    if flat:
        violations.append(f"{flat} flat prompts transfer(s) sent to a tiered workspace")
    return invariant_result(
        "tiered workspaces",
        violations,
        f"{len(cases)} requests on tiered children and pools as expected, first receive; "
        f"{flat} flat prompts transfers to them",
    )
