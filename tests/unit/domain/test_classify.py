"""Classifiers on upstream answers: always status AND body text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serenity_allocator.domain.errors import (
    is_metered_quota,
    is_not_ready,
    is_pool_exhausted,
    is_rate_limited,
)

POOL_EXHAUSTED = '{"message": "insufficient available units in subscription"}'
NOT_READY = '{"message": "workspace not ready"}'


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (422, POOL_EXHAUSTED, True),
        (422, '{"message": "Insufficient Available Units in subscription"}', True),
        (422, NOT_READY, False),
        (400, POOL_EXHAUSTED, False),
        (422, '{"message": "validation failed"}', False),
    ],
)
def test_is_pool_exhausted_needs_422_and_the_insufficient_units_text(
    status: int, body: str, expected: bool
) -> None:
    # Given an upstream answer / When classified / Then only 422 + that text is exhaustion
    assert is_pool_exhausted(status, body) is expected


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (422, NOT_READY, True),
        (422, "Workspace Not Ready", True),
        (422, POOL_EXHAUSTED, False),
        (409, NOT_READY, False),
        (422, "", False),
    ],
)
def test_is_not_ready_needs_422_and_the_not_ready_text(
    status: int, body: str, expected: bool
) -> None:
    # Given an upstream answer / When classified / Then only 422 + that text is "settling"
    assert is_not_ready(status, body) is expected


# The disguised quota 405 as captured live (semrush-user-manager.md), byte for byte.
NGINX_405 = (
    "<html>\r\n<head><title>405 Not Allowed</title></head>\r\n<body>\r\n"
    "<center><h1>405 Not Allowed</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (405, NGINX_405, True),
        (405, "Method Not Allowed", True),
        (405, '"a JSON string is not an object"', True),
        (405, '{"message": "Method Not Allowed"}', False),
        (405, '{"message": "Quota exceeded"}', False),
        (405, '{"message": "AI quota allocation exhausted"}', False),
        (405, '["quota"]', False),
        (405, "", False),
        (405, "  \r\n", False),
        (422, NGINX_405, False),
        (403, "<html>forbidden</html>", False),
    ],
)
def test_is_metered_quota_is_a_405_with_a_non_empty_non_json_body(
    status: int, body: str, expected: bool
) -> None:
    # Given a Project Engine answer / When classified
    # Then only a 405 whose body is non-empty and not a JSON object/array is the disguised
    # rejection; the words in the body never matter
    assert is_metered_quota(status, body) is expected


@pytest.mark.parametrize(("status", "expected"), [(429, True), (503, False), (422, False)])
def test_is_rate_limited_is_429(status: int, expected: bool) -> None:
    # Given a status / When classified / Then only 429 is rate limiting
    assert is_rate_limited(status, "Too Many Requests") is expected


def _shared_cases() -> list[dict[str, object]]:
    # The same file the Node client's tests read (clients/node/test/classify.test.js).
    path = Path(__file__).resolve().parents[2] / "fixtures" / "metered-quota-classifier.json"
    cases: list[dict[str, object]] = json.loads(path.read_text(encoding="utf-8"))["cases"]
    return cases


@pytest.mark.parametrize("case", _shared_cases(), ids=lambda case: str(case["name"]))
def test_is_metered_quota_agrees_with_the_shared_fixtures(case: dict[str, object]) -> None:
    # Given a case both clients share / When classified / Then the recorded verdict
    status, body = case["status"], case["body"]
    assert isinstance(status, int) and isinstance(body, str)
    assert is_metered_quota(status, body) is case["metered_quota"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("[" * 100_000, False),
        ('{"a":' * 100_000, False),
        ("  " + "[" * 100_000 + "]" * 100_000, False),
        ("<html>" * 100_000, True),
    ],
)
def test_is_metered_quota_is_bounded_on_pathologically_nested_bodies(
    body: str, expected: bool
) -> None:
    # Given a 405 whose body nests deeper than any parser recurses / When it is classified
    # Then it answers without raising: a body opening an array or object is JSON-shaped
    assert is_metered_quota(405, body) is expected
