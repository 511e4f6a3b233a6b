"""The per-brand ceiling: partial ceilings, the environment backstop's parsing, the cap rule."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serenity_allocator.domain.errors import BrandAiLimitError
from serenity_allocator.domain.messages import EnsureRequest, parse_request
from serenity_allocator.domain.model import Dimension, Totals
from serenity_allocator.domain.sizing import (
    Ceiling,
    cap_to_ceiling,
    combine_ceilings,
    parse_ceiling_value,
)
from serenity_allocator.handlers.settings import AllocatorSettings

ENV = {
    "ENVIRONMENT": "test",
    "MAX_RECEIVE_COUNT": "5",
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "tok",
}


def _ensure_with_ceiling(ceiling: object) -> EnsureRequest:
    body = {
        "kind": "ensure",
        "request_id": "r1",
        "workspace_id": "c1",
        "parent_workspace_id": "m1",
        "ceiling": ceiling,
    }
    request = parse_request(json.dumps(body))
    assert isinstance(request, EnsureRequest)
    return request


def test_parse_request_ceiling_naming_one_dimension_leaves_the_other_unenforced() -> None:
    # Given a message ceiling that names prompts only
    # When it is parsed
    request = _ensure_with_ceiling({"prompts": 500})

    # Then projects is not enforced (never read as 0)
    assert request.ceiling is not None
    assert request.ceiling.limit(Dimension.PROJECTS) is None
    assert request.ceiling.limit(Dimension.PROMPTS) == 500


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("500", 500),
        (" 500\n", 500),
        ("5o00", None),
        ("0", None),
        ("-5", None),
        ("+5", None),
        ("1e3", None),
        ("5.0", None),
        ("", None),
        ("   ", None),
        ("\u0665", None),  # an Arabic-Indic digit: digits means 0-9
        (None, None),
    ],
)
def test_parse_ceiling_value_takes_positive_ascii_digits_only(
    raw: str | None, expected: int | None
) -> None:
    # Given an environment value / When parsed / Then only positive 0-9 digits enforce a cap
    assert parse_ceiling_value(raw) == expected


def test_allocator_settings_backstop_malformed_value_is_not_enforced_and_reported() -> None:
    # Given a typo in one backstop variable and a good value in the other
    env = {
        **ENV,
        "SERENITY_BRAND_AI_CEILING_PROJECTS": "5o00",
        "SERENITY_BRAND_AI_CEILING_PROMPTS": "20000",
    }

    # When the settings are read
    settings = AllocatorSettings.from_env(env)

    # Then nothing fails, the typo is not enforced and named, the good value is enforced
    assert settings.brand_ai_ceiling == Ceiling(projects=None, prompts=20000)
    assert settings.ignored_ceiling_variables == ("SERENITY_BRAND_AI_CEILING_PROJECTS",)


def test_allocator_settings_backstop_unset_or_zero_is_not_enforced_nor_reported() -> None:
    # Given no projects backstop and a zero prompts backstop
    settings = AllocatorSettings.from_env({**ENV, "SERENITY_BRAND_AI_CEILING_PROMPTS": "0"})

    # When read / Then no dimension is enforced; zero is reported as ignored, unset is not
    assert not settings.brand_ai_ceiling.is_enforced
    assert settings.ignored_ceiling_variables == ("SERENITY_BRAND_AI_CEILING_PROMPTS",)


def test_combine_ceilings_takes_the_stricter_enforced_value_per_dimension() -> None:
    # Given a message ceiling on both dimensions and a backstop on prompts only
    message = Ceiling(projects=10, prompts=5000)
    backstop = Ceiling(prompts=3000)

    # When combined (with an absent ceiling too)
    combined = combine_ceilings(message, None, backstop)

    # Then each dimension takes the lowest enforced cap; unenforced sides never count as 0
    assert combined == Ceiling(projects=10, prompts=3000)
    assert combine_ceilings(Ceiling(projects=0), None) == Ceiling()


def test_cap_to_ceiling_tops_up_to_the_ceiling_when_the_exact_need_fits() -> None:
    # Given used 100 of 100 prompts, a need of 1 (exact 101, block-rounded 200), ceiling 150
    before, required, planned = Totals(prompts=100), Totals(prompts=101), Totals(prompts=200)

    # When capped
    capped = cap_to_ceiling(before, required, planned, Ceiling(prompts=150))

    # Then the top-up goes to the ceiling instead of being refused
    assert capped == Totals(prompts=150)


def test_cap_to_ceiling_refuses_only_when_the_exact_need_passes() -> None:
    # Given an exact need of 151 prompts under a ceiling of 150
    # When capped / Then brandAiLimit names the dimension, the exact need and the cap
    with pytest.raises(BrandAiLimitError) as raised:
        cap_to_ceiling(
            Totals(prompts=100), Totals(prompts=151), Totals(prompts=200), Ceiling(prompts=150)
        )
    assert (raised.value.dimension, raised.value.requested, raised.value.ceiling) == (
        "prompts",
        151,
        150,
    )


def test_cap_to_ceiling_leaves_an_unenforced_dimension_alone() -> None:
    # Given a projects top-up under a ceiling that names prompts only
    planned = Totals(projects=3, prompts=100)

    # When capped / Then the projects raise goes through unchanged
    assert (
        cap_to_ceiling(Totals(projects=1, prompts=100), planned, planned, Ceiling(prompts=5))
        == planned
    )


@given(
    used=st.integers(0, 5000),
    need=st.integers(1, 5000),
    block=st.integers(1, 500),
    limit=st.integers(1, 10_000),
)
def test_cap_to_ceiling_never_refuses_a_need_that_fits_and_never_passes_the_cap(
    used: int, need: int, block: int, limit: int
) -> None:
    # Given a full child (total = used) and a block-rounded plan
    required = used + need
    planned = -(-required // block) * block
    before = Totals(prompts=used)
    ceiling = Ceiling(prompts=limit)

    # When capped
    if required > limit:
        with pytest.raises(BrandAiLimitError):
            cap_to_ceiling(before, Totals(prompts=required), Totals(prompts=planned), ceiling)
        return
    capped = cap_to_ceiling(before, Totals(prompts=required), Totals(prompts=planned), ceiling)

    # Then the write fits and the cap holds
    assert required <= capped.prompts <= limit


def test_parse_ceiling_value_one_is_the_smallest_enforced_cap() -> None:
    # Given the smallest positive value / When parsed / Then it is enforced as 1
    assert parse_ceiling_value("1") == 1
