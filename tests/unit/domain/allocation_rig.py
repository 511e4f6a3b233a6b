"""The one-parent, one-child family the domain allocation tests share (in-memory gateway)."""

from __future__ import annotations

from serenity_allocator.domain.model import DimensionUsage, Totals
from tests.fakes import InMemoryGateway

MASTER = "master-1"
CHILD = "child-1"
BIG_POOL = Totals(projects=50, prompts=10_000)


def one_child_family(
    *,
    child_total: Totals,
    child_used: Totals | None = None,
    child_drafted: Totals | None = None,
    pool_total: Totals = BIG_POOL,
    pool_used: Totals | None = None,
) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=pool_total, used=pool_used)
    gateway.add_child(CHILD, MASTER, total=child_total, used=child_used, drafted=child_drafted)
    return gateway


def dimension_usage(used: int, total: int, drafted: int = 0) -> DimensionUsage:
    return DimensionUsage(used=used, drafted=drafted, total=total)
