"""Tiered prompt workspaces in a local run: the family, its requests, and the check.

Facts (semrush-user-manager.md, "The tiered prompt shape"): some workspaces answer with
``daily_prompts`` + ``weekly_prompts`` and no ``prompts``; the allocator must never send one a
flat ``prompts`` transfer, and never carve prompts from such a pool. The family here has one
of each case beside the synthetic pools of the demo and the harness:

- ``tiered-roomy`` (tiered child of a flat pool, two projects to spare): a need both tiers
  cover -> ``hot-path``;
- ``tiered-short``: a need past the daily tier -> ``rejected / tieredPrompts`` (first receive);
- ``tiered-projects``: one more project -> ``topped-up`` with a projects-only transfer, then a
  release (projects only, its prompts never lowered);
- ``tiered-pool-child`` (flat child of a tiered pool): a prompts need -> ``tieredPrompts``.

The check: each request ended as expected, and the simulator's ``flat_prompts_to_tiered``
counter stayed 0.

Beside it, the real sizes (the doc's "Child workspaces, and other read-side facts"): the flat
pools above are gold-tier (13 projects / 800 prompts); a dev-like parent reads 0/2 projects and
0/1913 prompts; a customer parent is unmetered with 200 projects, 0 used.
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
DEV_PARENT = "real-dev-parent"
CUSTOMER_PARENT = "real-customer-parent"


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
        child("tiered-roomy", FLAT_POOL, _tiers((1, 3), (10, 100), (40, 500))),
        child("tiered-short", FLAT_POOL, _tiers((1, 1), (95, 100), (95, 500))),
        child("tiered-projects", FLAT_POOL, _tiers((1, 1), (0, 100), (0, 500))),
        child("tiered-pool-child", TIERED_POOL, _flat((1, 1), (100, 100))),
    ]


def real_sized_family() -> list[dict[str, Any]]:
    """A dev-like parent (0/2, 0/1913) and an unmetered customer parent (200 projects)."""
    return [
        {"id": DEV_PARENT, "title": "Dev-like parent", "ai": _flat((0, 2), (0, 1913))},
        {"id": "real-dev-child", "parent_id": DEV_PARENT, "ai": _flat((0, 0), (0, 0))},
        {
            "id": CUSTOMER_PARENT,
            "title": "Customer parent (unmetered)",
            "limits_enabled": False,
            "ai": _flat((0, 200), (0, 0)),
        },
        {"id": "real-customer-child", "parent_id": CUSTOMER_PARENT, "ai": _flat((0, 0), (0, 0))},
    ]


def real_sized_requests() -> list[tuple[Request, tuple[str, str | None]]]:
    """Their requests, each with its expected ``(status, error_code)``."""
    return [
        (
            build_ensure("real-dev-child", DEV_PARENT, {"projects": 1, "prompts": 150}),
            ("topped-up", None),
        ),
        # Two projects in the whole dev parent: three cannot be carved.
        (
            build_ensure("real-dev-child", DEV_PARENT, {"projects": 3}),
            ("rejected", "orgPoolExhausted"),
        ),
        (
            build_ensure("real-customer-child", CUSTOMER_PARENT, {"projects": 1, "prompts": 40}),
            ("unmetered", None),
        ),
    ]


def real_sized_beside(
    cases: Iterable[tuple[Request, tuple[str, str | None]]],
) -> tuple[list[dict[str, Any]], list[Request]]:
    """The real-sized family and ``cases``' requests, as a harness run's ``beside``."""
    return real_sized_family(), [request for request, _ in cases]


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


def check_real_sized(
    expected: Iterable[tuple[Request, tuple[str, str | None]]],
    outcomes: Iterable[AllocationOutcome],
) -> InvariantResult:
    """Every request on the dev-like and customer parents ended as expected."""
    cases = list(expected)
    # A refusal may come after a sibling-reclaim park: its receive is not checked here.
    violations = _unexpected(cases, outcomes, first_receive=False)
    return invariant_result(
        "real-sized pools",
        violations,
        f"{len(cases)} requests on the dev-like (0/2, 0/1913) and unmetered customer parents",
    )


def _unexpected(
    cases: list[tuple[Request, tuple[str, str | None]]],
    outcomes: Iterable[AllocationOutcome],
    *,
    first_receive: bool = True,
) -> list[str]:
    first: dict[str, AllocationOutcome] = {}
    for outcome in outcomes:
        first.setdefault(outcome.request_id, outcome)
    violations: list[str] = []
    for request, (status, code) in cases:
        got = first.get(request.request_id)
        seen = None if got is None else (got.status, got.error_code)
        late = first_receive and got is not None and got.receive_count != 1
        if seen != (status, code) or late:
            violations.append(f"{request.workspace_id}: expected {status}/{code}, got {seen}")
    return violations


def check_tiered(
    expected: Iterable[tuple[Request, tuple[str, str | None]]],
    outcomes: Iterable[AllocationOutcome],
    dump: Mapping[str, Any],
) -> InvariantResult:
    """Every tiered request ended as expected; no flat ``prompts`` reached a tiered workspace."""
    cases = list(expected)
    violations = _unexpected(cases, outcomes)
    flat = int(dump.get("violations", {}).get("flat_prompts_to_tiered", 0))
    if flat:
        violations.append(f"{flat} flat prompts transfer(s) sent to a tiered workspace")
    return invariant_result(
        "tiered workspaces",
        violations,
        f"{len(cases)} requests on tiered children and pools as expected, first receive; "
        f"{flat} flat prompts transfers to them",
    )
