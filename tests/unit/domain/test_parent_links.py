"""Parent links: the upstream says who a child's parent is; a container remembers it."""

from __future__ import annotations

from collections.abc import Sequence

from serenity_allocator.domain.container_memory import ParentLinks, ParentMeteringCache
from serenity_allocator.domain.model import Totals, WorkspaceRecord
from tests.fakes import LIST_FAMILY, FakeClock, InMemoryGateway

MASTER = "master-1"
OTHER_MASTER = "master-2"
POOL = Totals(projects=10, prompts=1000)


def _gateway() -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL)
    gateway.add_master(OTHER_MASTER, total=POOL, ai_limits_enabled=False)
    gateway.add_child("child-1", MASTER)
    gateway.add_child("child-2", MASTER)
    gateway.add_child("foreign-1", OTHER_MASTER)
    return gateway


def test_is_parent_of_confirms_a_real_link_and_remembers_the_family() -> None:
    # Given a fresh container
    gateway = _gateway()
    links = ParentLinks(gateway)

    # When two children of one parent are checked
    assert links.is_parent_of(MASTER, "child-1") is True
    assert links.is_parent_of(MASTER, "child-2") is True

    # Then one family listing answered both
    assert gateway.calls_of(LIST_FAMILY) == [MASTER]


def test_is_parent_of_refuses_a_parent_that_is_not_the_childs() -> None:
    # Given a child of MASTER whose link is known
    gateway = _gateway()
    links = ParentLinks(gateway)
    links.is_parent_of(MASTER, "child-1")

    # When a message names another org's master as its parent / Then it is refused, from the
    # cached link, without another call
    assert links.is_parent_of(OTHER_MASTER, "child-1") is False
    assert gateway.calls_of(LIST_FAMILY) == [MASTER]


def test_is_parent_of_refuses_an_unknown_child_without_caching_its_absence() -> None:
    # Given a child the claimed parent's family does not list (yet)
    gateway = _gateway()
    links = ParentLinks(gateway)
    assert links.is_parent_of(MASTER, "child-3") is False

    # When the child is created under that parent and checked again
    gateway.add_child("child-3", MASTER)

    # Then it is found (the absence was not remembered)
    assert links.is_parent_of(MASTER, "child-3") is True
    assert gateway.calls_of(LIST_FAMILY) == [MASTER, MASTER]


def test_is_parent_of_refuses_a_workspace_as_its_own_parent_without_a_call() -> None:
    # Given a master named as its own child / When checked / Then refused, no call made
    gateway = _gateway()
    assert ParentLinks(gateway).is_parent_of(MASTER, MASTER) is False
    assert gateway.calls_of(LIST_FAMILY) == []


def test_is_parent_of_shares_its_listing_with_the_metering_cache() -> None:
    # Given the metering cache learning from the links' listings
    gateway = _gateway()
    metering = ParentMeteringCache(gateway, FakeClock(), ttl_s=300.0)
    seen: list[tuple[str, int]] = []

    def learn(parent_id: str, family: Sequence[WorkspaceRecord]) -> bool:
        seen.append((parent_id, len(family)))
        return metering.remember(parent_id, family)

    links = ParentLinks(gateway, on_listing=learn)

    # When a link is checked, then the parent's metering asked
    assert links.is_parent_of(OTHER_MASTER, "foreign-1") is True
    assert metering.is_unmetered(OTHER_MASTER) is True

    # Then one listing answered both questions
    assert seen == [(OTHER_MASTER, 2)]
    assert gateway.calls_of(LIST_FAMILY) == [OTHER_MASTER]


def test_children_of_counts_the_children_the_listings_named_once_each() -> None:
    # Given a container that listed both families, one of them twice (a miss for a child
    # created later lists it again)
    gateway = _gateway()
    links = ParentLinks(gateway)
    assert links.is_parent_of(MASTER, "child-1") is True
    assert links.is_parent_of(OTHER_MASTER, "foreign-1") is True
    assert links.is_parent_of(MASTER, "not-yet-created") is False

    # Then each pool's children are counted once, its own only; an unseen pool counts one
    assert (links.children_of(MASTER), links.children_of(OTHER_MASTER)) == (2, 1)
    assert links.children_of("never-listed") == 1
    assert gateway.calls_of(LIST_FAMILY) == [MASTER, OTHER_MASTER, MASTER]
