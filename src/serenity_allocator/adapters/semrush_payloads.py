"""Strict reading of the upstream's JSON bodies into domain values.

The upstream's shapes are the adapter's business (semrush-user-manager.md): the domain receives
``AiResources`` and never sees a response body. A missing or mistyped field raises
``MalformedResponseError`` naming it, because a silent 0 would over- or under-allocate.

Two shapes of ``/resources`` are known (the doc's "The tiered prompt shape"): the flat one
(``prompts``) and, since 2026-08, the tiered one (``daily_prompts`` + ``weekly_prompts``, no
``prompts``). They are read as the upstream did: flat ``prompts`` first; else both tiers
complete; else the shape is unrecognised, a malformed answer. The flat shape may carry a
``weekly_prompts`` of its own, so only ``daily_prompts`` (without ``prompts``) marks a tiered
body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.errors import MalformedResponseError
from ..domain.model import (
    AiResources,
    Dimension,
    DimensionUsage,
    PromptTiers,
    Totals,
    WorkspaceRecord,
)


def _count(value: Any, where: str) -> int:
    # bool is an int subclass in Python; a JSON true is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedResponseError(f"{where} must be an integer, got {type(value).__name__}")
    return value


_WHERE = "product_resources.ai.resources"
_TIERS = ("daily_prompts", "weekly_prompts")


def _dimension(block: Mapping[str, Any], key: str) -> DimensionUsage:
    where = f"{_WHERE}.{key}"
    raw = block.get(key)
    if not isinstance(raw, Mapping):
        raise MalformedResponseError(f"{where} is missing")
    for required in ("used", "total"):
        # A missing used/total must fail loudly: a silent 0 would over- or under-allocate.
        if raw.get(required) is None:
            raise MalformedResponseError(f"{where}.{required} is missing")
    drafted = raw.get("drafted")
    return DimensionUsage(
        used=_count(raw["used"], f"{where}.used"),
        total=_count(raw["total"], f"{where}.total"),
        drafted=0 if drafted is None else _count(drafted, f"{where}.drafted"),
    )


def parse_ai_resources(body: Any) -> AiResources:
    """Parse ``GET /v1/workspaces/{id}/resources`` in either shape; ``drafted`` defaults to 0.

    Raises:
        MalformedResponseError: a missing or mistyped field, or neither shape (naming it).
    """
    if not isinstance(body, Mapping):
        raise MalformedResponseError("resources body is not a JSON object")
    product = body.get("product_resources")
    ai = product.get("ai") if isinstance(product, Mapping) else None
    resources = ai.get("resources") if isinstance(ai, Mapping) else None
    if not isinstance(resources, Mapping):
        raise MalformedResponseError("product_resources.ai.resources is missing")
    projects = _dimension(resources, Dimension.PROJECTS.value)
    # ``weekly_prompts`` alone is part of the flat shape too: only ``daily_prompts`` says tiered.
    if Dimension.PROMPTS.value in resources or _TIERS[0] not in resources:
        return AiResources(
            projects=projects, prompts=_dimension(resources, Dimension.PROMPTS.value)
        )
    # Tiered: both tiers must be complete; half a tiered body is as malformed as no prompts.
    daily, weekly = (_dimension(resources, tier) for tier in _TIERS)
    return AiResources.tiered(projects, PromptTiers(daily=daily, weekly=weekly))


def transfer_body(totals: Totals, *, include_prompts: bool = True) -> dict[str, Any]:
    """The body of ``POST /v2/workspaces/{id}/resources/transfer``.

    Both dimensions, normally: a partial body would leave the other dimension to the upstream.
    Without prompts only for a tiered workspace, where that is exactly the point: nobody knows
    what a flat ``prompts`` does to its daily and weekly tiers.
    """
    ai: dict[str, int] = {"projects": totals.projects}
    if include_prompts:
        ai["prompts"] = totals.prompts
    return {"resources": {"ai": ai}}


def workspace_record(item: Any, operation: str) -> WorkspaceRecord:
    """One workspace object of a listing or a creation, read strictly (``operation`` names it)."""
    if not isinstance(item, Mapping):
        raise MalformedResponseError(f"{operation}: workspace is not a JSON object")
    workspace_id = item.get("id")
    status = item.get("status")
    title = item.get("title") or ""
    if not isinstance(workspace_id, str) or not workspace_id:
        raise MalformedResponseError(f"{operation}: workspace has no string id")
    if not isinstance(status, str):
        raise MalformedResponseError(f"{operation}: workspace has no string status")
    if not isinstance(title, str):
        raise MalformedResponseError(f"{operation}: workspace title is not a string")
    return WorkspaceRecord(
        id=workspace_id,
        title=title,
        status=status,
        parent_id=_parent_id(item, operation),
        ai_limits_enabled=_ai_limits_enabled(item, operation),
    )


def _parent_id(item: Mapping[str, Any], operation: str) -> str | None:
    parent_id = item.get("parent_id")
    if parent_id is None:
        # The swagger also has a nested ``parent: {id, title}``; take it when the flat field
        # is absent.
        parent = item.get("parent")
        parent_id = parent.get("id") if isinstance(parent, Mapping) else None
    if parent_id is None or parent_id == "":
        # A master workspace has no parent; an empty string means the same.
        return None
    if not isinstance(parent_id, str):
        raise MalformedResponseError(f"{operation}: workspace parent_id is not a string")
    return parent_id


def _ai_limits_enabled(item: Mapping[str, Any], operation: str) -> bool | None:
    # swagger: product_tiers[] of {product: {id: "ai" | "seo" | ..., limits_enabled}, tier}.
    tiers = item.get("product_tiers")
    if tiers is None:
        return None
    if not isinstance(tiers, list):
        raise MalformedResponseError(f"{operation}: workspace product_tiers is not an array")
    for tier in tiers:
        product = tier.get("product") if isinstance(tier, Mapping) else None
        if isinstance(product, Mapping) and product.get("id") == "ai":
            enabled = product.get("limits_enabled")
            if enabled is None:
                return None
            if not isinstance(enabled, bool):
                raise MalformedResponseError(f"{operation}: ai limits_enabled is not a boolean")
            return enabled
    return None
