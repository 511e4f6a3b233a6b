"""Strict parsing of the upstream's resources body (the Semrush adapter's payload reader)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from serenity_allocator.adapters.semrush import parse_ai_resources
from serenity_allocator.domain.errors import MalformedResponseError
from serenity_allocator.domain.model import AiResources, DimensionUsage


def _body() -> dict[str, Any]:
    return {
        "product_resources": {
            "ai": {
                "resources": {
                    "projects": {"used": 2, "drafted": 1, "total": 5},
                    "prompts": {"used": 150, "drafted": 30, "total": 300},
                    "weekly_prompts": {"used": 0, "drafted": 0, "total": 0},
                }
            }
        }
    }


# ---- strict reading -----------------------------------------------------------------------


def test_parse_ai_resources_reads_used_drafted_and_total() -> None:
    # Given a complete resources body / When parsed
    resources = parse_ai_resources(_body())

    # Then both AI dimensions come through as reported
    assert resources == AiResources(
        projects=DimensionUsage(used=2, drafted=1, total=5),
        prompts=DimensionUsage(used=150, drafted=30, total=300),
    )


@pytest.mark.parametrize(
    ("path", "named"),
    [
        (("product_resources", "ai"), "product_resources.ai.resources"),
        (("product_resources", "ai", "resources"), "product_resources.ai.resources"),
        (("product_resources",), "product_resources.ai.resources"),
        (
            ("product_resources", "ai", "resources", "prompts"),
            "product_resources.ai.resources.prompts",
        ),
        (
            ("product_resources", "ai", "resources", "projects", "used"),
            "product_resources.ai.resources.projects.used",
        ),
        (
            ("product_resources", "ai", "resources", "prompts", "total"),
            "product_resources.ai.resources.prompts.total",
        ),
    ],
)
def test_parse_ai_resources_missing_field_raises_naming_it(
    path: tuple[str, ...], named: str
) -> None:
    # Given a body missing one field (never to be read as a silent 0)
    body = copy.deepcopy(_body())
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]

    # When parsed / Then it fails loudly, naming the field
    with pytest.raises(MalformedResponseError, match=named.replace(".", r"\.")):
        parse_ai_resources(body)


def test_parse_ai_resources_null_used_counts_as_missing() -> None:
    # Given a null used count
    body = _body()
    body["product_resources"]["ai"]["resources"]["prompts"]["used"] = None

    # When parsed / Then it is as malformed as a missing one
    with pytest.raises(MalformedResponseError, match=r"prompts\.used"):
        parse_ai_resources(body)


def test_parse_ai_resources_missing_drafted_is_zero() -> None:
    # Given a body without drafted counts
    body = _body()
    for usage in body["product_resources"]["ai"]["resources"].values():
        del usage["drafted"]

    # When parsed
    resources = parse_ai_resources(body)

    # Then drafted reads 0 (the documented default), used and total unchanged
    assert resources.prompts == DimensionUsage(used=150, drafted=0, total=300)
    assert resources.projects.drafted == 0


@pytest.mark.parametrize("bad", ["150", 1.5, True, [], {}])
@pytest.mark.parametrize("field", ["used", "drafted", "total"])
def test_parse_ai_resources_non_integer_count_raises(field: str, bad: object) -> None:
    # Given a count that is not a JSON integer (a bool is not a count either)
    body = _body()
    body["product_resources"]["ai"]["resources"]["prompts"][field] = bad

    # When parsed / Then it fails naming the field
    with pytest.raises(MalformedResponseError, match=rf"prompts\.{field} must be an integer"):
        parse_ai_resources(body)


@pytest.mark.parametrize("body", [None, [], "resources", 42])
def test_parse_ai_resources_non_object_body_raises(body: object) -> None:
    # Given a body that is not a JSON object / When parsed / Then it is malformed
    with pytest.raises(MalformedResponseError):
        parse_ai_resources(body)
