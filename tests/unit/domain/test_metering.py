"""Is a parent metered? Learned from the family listing, cached per container with a TTL."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.container_memory import ParentMeteringCache
from serenity_allocator.domain.model import Totals, WorkspaceRecord
from tests.fakes import LIST_FAMILY, FakeClock, InMemoryGateway

MASTER = "master-1"
POOL = Totals(projects=10, prompts=1000)
TTL_S = 300.0


def _gateway(limits_enabled: bool | None) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL, ai_limits_enabled=limits_enabled)
    gateway.add_child("child-1", MASTER)
    return gateway


@pytest.mark.parametrize(
    ("limits_enabled", "unmetered"),
    [(False, True), (True, False), (None, False)],
    ids=["limits-disabled", "limits-enabled", "tier-absent"],
)
def test_is_unmetered_reads_limits_enabled_of_the_parent(
    limits_enabled: bool | None, unmetered: bool
) -> None:
    # Given a parent whose ai tier says limits_enabled (or has no tier at all)
    cache = ParentMeteringCache(_gateway(limits_enabled), FakeClock(), TTL_S)

    # When asked / Then only an explicit false is unmetered; absent reads as metered (safe)
    assert cache.is_unmetered(MASTER) is unmetered


class _ListingWithoutParent(InMemoryGateway):
    """A listing that leaves the parent's own record out (only its descendants)."""

    def list_family(self, parent_id: str) -> list[WorkspaceRecord]:
        return [r for r in super().list_family(parent_id) if r.id != parent_id]


def test_is_unmetered_parent_missing_from_its_listing_counts_as_metered() -> None:
    # Given an unmetered parent whose listing does not include its own record
    gateway = _ListingWithoutParent()
    gateway.add_master(MASTER, total=POOL, ai_limits_enabled=False)
    gateway.add_child("child-1", MASTER)
    cache = ParentMeteringCache(gateway, FakeClock(), TTL_S)

    # When asked / Then metered: nothing says otherwise, so carve as before
    assert cache.is_unmetered(MASTER) is False


def test_is_unmetered_cached_for_ttl_one_family_call() -> None:
    # Given an unmetered parent and a cache on a fake clock
    clock = FakeClock()
    gateway = _gateway(False)
    cache = ParentMeteringCache(gateway, clock, TTL_S)

    # When asked three times within the TTL
    answers = [cache.is_unmetered(MASTER)]
    clock.advance(TTL_S / 2)
    answers.append(cache.is_unmetered(MASTER))
    clock.advance(TTL_S / 2 - 0.001)
    answers.append(cache.is_unmetered(MASTER))

    # Then the family was listed once and every answer agrees
    assert answers == [True, True, True]
    assert gateway.calls_of(LIST_FAMILY) == [MASTER]


def test_is_unmetered_refreshed_after_ttl() -> None:
    # Given a cached "unmetered" answer
    clock = FakeClock()
    gateway = _gateway(False)
    cache = ParentMeteringCache(gateway, clock, TTL_S)
    assert cache.is_unmetered(MASTER) is True

    # When the parent starts metering and the TTL passes
    gateway.workspaces[MASTER].ai_limits_enabled = True
    clock.advance(TTL_S)

    # Then the family is listed again and the new answer wins
    assert cache.is_unmetered(MASTER) is False
    assert gateway.calls_of(LIST_FAMILY) == [MASTER, MASTER]


def test_is_unmetered_caches_each_parent_separately() -> None:
    # Given two parents, one metered and one not
    gateway = _gateway(False)
    gateway.add_master("master-2", total=POOL, ai_limits_enabled=True)
    cache = ParentMeteringCache(gateway, FakeClock(), TTL_S)

    # When each is asked twice
    answers = [cache.is_unmetered(p) for p in (MASTER, "master-2", MASTER, "master-2")]

    # Then each answer is its own, and each parent was listed once
    assert answers == [True, False, True, False]
    assert gateway.calls_of(LIST_FAMILY) == [MASTER, "master-2"]
