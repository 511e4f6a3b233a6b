"""An exchanged access token's lifetime, and how a holder judges it before presenting it."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.model import (
    ASSUMED_ACCESS_LIFETIME_S,
    AccessLifetime,
    TokenFreshness,
)


@pytest.mark.parametrize(
    ("expires_in", "expires_at"),
    [
        (300, 400.0),  # IMS's own figure, from the moment the exchange was sent
        (None, 100.0 + ASSUMED_ACCESS_LIFETIME_S),  # no usable figure: the assumed 299 s
        (0, 100.0),  # dead on arrival: never presentable
        (-5, 100.0),  # a negative figure is no lifetime at all, not one in the past
    ],
)
def test_a_lifetime_runs_from_the_exchange_sent(expires_in: int | None, expires_at: float) -> None:
    # Given an exchange sent at 100 s on the caller's clock
    # Then its token dies ``expires_in`` later (the assumed lifetime without one, never before
    # the send)
    assert AccessLifetime.of(100.0, expires_in) == AccessLifetime(expires_at)


def test_a_call_that_would_end_as_the_token_dies_does_not_fit() -> None:
    # Given a token that dies at 400 s
    lifetime = AccessLifetime(400.0)

    # Then a call of 10 s fits when it ends before, and not when it ends at the moment it dies
    assert lifetime.outlives(389.9, 10.0)
    assert not lifetime.outlives(390.0, 10.0)


def test_a_holder_judges_a_token_on_its_own_clock_and_call_length() -> None:
    # Given a holder whose clock reads 380 s and whose calls last up to 15 s
    freshness = TokenFreshness(clock=lambda: 380.0, call_s=15.0)

    # Then a token sent at 100 s with 300 s of life (dies at 400) is presentable, and one
    # with 294 s (dies at 394, before the call would end at 395) is not
    assert freshness.presentable(freshness.lifetime_of(100.0, 300))
    assert not freshness.presentable(freshness.lifetime_of(100.0, 294))
