"""Strict reading of the upstream's JSON bodies into domain values.

The upstream's shapes are the adapter's business (semrush-user-manager.md): the domain receives
``AiResources`` and never sees a response body. A missing or mistyped field raises
``MalformedResponseError`` naming it, because a silent 0 would over- or under-allocate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.errors import MalformedResponseError
from ..domain.model import AiResources, Dimension, DimensionUsage


def _count(value: Any, where: str) -> int:
    # bool is an int subclass in Python; a JSON true is not a count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedResponseError(f"{where} must be an integer, got {type(value).__name__}")
    return value


def _dimension(block: Mapping[str, Any], dim: Dimension) -> DimensionUsage:
    where = f"product_resources.ai.resources.{dim.value}"
    raw = block.get(dim.value)
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
    """Parse ``GET /v1/workspaces/{id}/resources``; a missing field raises, ``drafted`` is 0."""
    if not isinstance(body, Mapping):
        raise MalformedResponseError("resources body is not a JSON object")
    product = body.get("product_resources")
    ai = product.get("ai") if isinstance(product, Mapping) else None
    resources = ai.get("resources") if isinstance(ai, Mapping) else None
    if not isinstance(resources, Mapping):
        raise MalformedResponseError("product_resources.ai.resources is missing")
    return AiResources(
        projects=_dimension(resources, Dimension.PROJECTS),
        prompts=_dimension(resources, Dimension.PROMPTS),
    )
