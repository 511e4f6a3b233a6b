"""How big a top-up is: sized by the pool, fair when the pool is short, capped by a ceiling.

The rule (docs/decisions/0027-top-ups-sized-by-the-pool.md), per dimension with block ``B``:

- **Fair headroom.** What is left free once the child's exact lack is carved, spread evenly
  over the pool's children, is the *level* (max-min fair share: free units are shared
  equally, and no child gets headroom above the level while another might be refused). A level
  of :data:`ROOMY_BLOCKS` blocks or more is a pool with room: headroom up to the level. Below
  it the pool is *tight* and headroom shrinks with the square of the level; under what the
  child lacks it is 0: the exact need, nothing parked where others may need it.
- **Top-up.** A short child rises to what it needs plus ``min(desired, fair)`` headroom. On a
  pool with room *desired* is :data:`ROOMY_BLOCKS` blocks (never above the fair share: room
  means the level holds that many blocks for every child); on a tight pool it rounds the need
  plus a low-water mark (half a block, at least one unit) up to whole blocks. Either way it is
  at least what the request asked for again (its next one is likely as big). The configured
  block bounds every top-up: four of them at most on a pool with room, no setting per pool.
- **Refill ahead.** A child of a pool with room whose need fits but leaves less than two
  blocks (half what a top-up leaves there), or less than it asked for, is topped up now, while
  its next write still has the room it holds (the gate enforces a raise about 9 s late):
  never from a tight pool.
- **Surplus back.** A child holding more than two blocks beyond its need of a tight pool gives
  the excess above its fair headroom back, in its own ensure: the surplus returns under the
  authority of the request's own user, in the child's own message group.
- **Ceiling.** The per-brand ceiling (semrush-user-manager.md, "The per-brand ceiling") is a
  runaway circuit breaker that never refuses a write that fits: one global backstop per
  environment, one value per dimension, each optional. An omitted dimension is NOT enforced
  (never read as 0); an unset, malformed or non-positive value leaves it unenforced (a
  configuration typo must never break a customer write), and only digits parse (``5o00`` must
  not become 5). With a message's ceiling and the environment's backstop both set, the
  stricter applies. It caps a top-up, it does not refuse one that fits: when the block-rounded
  target passes the ceiling but the exact need fits, the child is topped up to the ceiling
  instead; ``brandAiLimit`` only when the exact need itself passes it.

Pure arithmetic over the reads the ensure makes; no call of its own.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import BrandAiLimitError
from .model import AiResources, Blocks, Dimension, DimensionUsage, Totals, round_up_to_block

Sizing = Literal["hot-path", "topped-up", "refilled", "rightsized"]
"""What a plan does: nothing, a top-up of a short child, a refill ahead, or surplus back."""


@dataclass(frozen=True)
class PoolShare:
    """What a top-up knows of its pool: the units free in it and the children that may ask."""

    free: Totals
    children: int

    @classmethod
    def of(cls, pool: AiResources, children: int) -> PoolShare:
        """The share of ``pool`` (free clamped at 0) among ``children`` (at least one)."""
        free = Totals(**{dim.value: max(0, pool.get(dim).free) for dim in Dimension})
        return cls(free=free, children=max(1, children))

    def level(self, dim: Dimension, lack: int) -> int:
        """Units of ``dim`` each child may hold as headroom once ``lack`` is carved."""
        return max(0, self.free.get(dim) - lack) // self.children


@dataclass(frozen=True)
class Plan:
    """The totals a sized ensure sets, and what that is."""

    target: Totals
    sizing: Sizing


def low_water(blocks: Blocks, dim: Dimension) -> int:
    """The margin a top-up of a tight pool rounds up to whole blocks: half a block, at least 1."""
    return max(1, blocks.get(dim) // 2)


def roomy_headroom(blocks: Blocks, dim: Dimension) -> int:
    """The headroom a top-up of a pool with room leaves: :data:`ROOMY_BLOCKS` blocks.

    The same blocks that define room, so it never passes a fair share; enough for a burst of
    writes to land without waiting on the gate's lag (the benchmark's bursts reach 240 prompts,
    where a block-rounded top-up left at most 150).
    """
    return ROOMY_BLOCKS * blocks.get(dim)


def refill_below(blocks: Blocks, dim: Dimension, demand: int) -> int:
    """Headroom under which a child of a pool with room is refilled ahead.

    Half of what a top-up of a pool with room leaves (two blocks), or as much as the request
    asked when that is more.
    """
    return max(roomy_headroom(blocks, dim) // 2, demand)


def high_water(blocks: Blocks, dim: Dimension) -> int:
    """Headroom above which a child of a tight pool gives surplus back: two blocks.

    Only a tight pool acts on it. There a top-up leaves under one block (the fair headroom of a
    tight pool), so a child the allocator sized on it stays on the hot path; what a child kept
    from when the pool had room (up to four blocks) goes back above two.
    """
    return 2 * blocks.get(dim)


def needs_pool(
    child: AiResources, required: Totals, blocks: Blocks, last: PoolShare | None = None
) -> bool:
    """True when the pool must be read: a dimension short, or one a read may move.

    ``last``: the pool as this container last read it, if it did. A dimension under its refill
    mark (:func:`refill_below`) is worth a read unless that read found the pool tight (no
    refill from a tight pool); one over high water only when it did (surplus goes back to a
    tight pool only). Otherwise the ensure is the hot path: one read, nothing moves.
    """
    for dim in Dimension:
        usage = child.get(dim)
        left = usage.total - required.get(dim)
        tight = last is not None and is_tight(last, 0, dim, blocks)
        low = refill_below(blocks, dim, demand_of(usage, required.get(dim)))
        if left < 0 or (left < low and not tight):
            return True
        if left > high_water(blocks, dim) and tight:
            return True
    return False


def demand_of(usage: DimensionUsage, required: int) -> int:
    """What the request asks beyond what the child holds in use: the room to keep for its next.

    A child that asked this much once is likely to ask as much again soon; headroom for one
    more such request spares its next write the gate's lag.
    """
    return max(0, required - usage.used - usage.drafted)


def is_short(child: AiResources, required: Totals) -> bool:
    """True when a dimension holds less than ``required``: the write would be refused."""
    return any(required.get(dim) > child.get(dim).total for dim in Dimension)


ROOMY_BLOCKS = 4
"""A pool has room when every child's fair level holds this many blocks; under it, it is tight."""


def fair_headroom(share: PoolShare, lack: int, dim: Dimension, blocks: Blocks) -> int:
    """The most headroom of ``dim`` a child may hold: the level, shrunk on a tight pool.

    Under :data:`ROOMY_BLOCKS` blocks the headroom falls with the square of the level
    (``level² / 16B``: a whole block at four blocks of level), so the tighter the pool, the
    closer to exact its top-ups are.
    """
    block, level = blocks.get(dim), share.level(dim, lack)
    if level < lack:
        # What is left cannot give every child what this one lacks: exact, nothing parked.
        return 0
    roomy = ROOMY_BLOCKS * block
    return level if level >= roomy else level * level // (roomy * roomy // block)


def is_tight(share: PoolShare, lack: int, dim: Dimension, blocks: Blocks) -> bool:
    """True when the fair level of ``dim`` holds fewer than :data:`ROOMY_BLOCKS` blocks."""
    return share.level(dim, lack) < ROOMY_BLOCKS * blocks.get(dim)


def plan_sizing(
    child: AiResources,
    required: Totals,
    blocks: Blocks,
    share: PoolShare,
    movable: Collection[Dimension] = tuple(Dimension),
) -> Plan:
    """The totals the ensure sets per dimension, from the child, its need and the pool's share.

    ``movable``: the dimensions a transfer may set (a tiered workspace's prompts may not move:
    a short one is refused before this is asked, so it only keeps its total here).
    """
    target: dict[str, int] = {}
    moves: set[Sizing] = set()
    for dim in Dimension:
        usage = child.get(dim)
        total, need = usage.total, required.get(dim)
        demand = demand_of(usage, need)
        sized = _size_one(_Holding(total, need, demand), blocks, dim, share)
        value, sizing = sized.total, sized.sizing
        if dim not in movable:
            value, sizing = total, "hot-path"
        target[dim.value] = value
        moves.add(sizing)
    for sizing in ("topped-up", "refilled", "rightsized"):
        if sizing in moves:
            return Plan(Totals(**target), sizing)
    return Plan(Totals(**target), "hot-path")


@dataclass(frozen=True)
class _Holding:
    """One dimension of the child: what it holds, what it must hold, and its recent demand."""

    total: int
    need: int
    demand: int


@dataclass(frozen=True)
class _Sized:
    """One dimension's planned total, and which sizing set it."""

    total: int
    sizing: Sizing


def _desired_headroom(holding: _Holding, blocks: Blocks, dim: Dimension, tight: bool) -> int:
    """The headroom a top-up aims for before the fair share caps it.

    Four blocks on a pool with room; on a tight pool the need plus low water rounded up to whole
    blocks, less the need. Either way at least what the request asked (its next is likely as big).
    """
    need = holding.need
    if tight:
        wanted = round_up_to_block(need + low_water(blocks, dim), blocks.get(dim)) - need
    else:
        wanted = roomy_headroom(blocks, dim)
    return max(wanted, holding.demand)


def _size_one(holding: _Holding, blocks: Blocks, dim: Dimension, share: PoolShare) -> _Sized:
    total, need, demand = holding.total, holding.need, holding.demand
    lack = max(0, need - total)
    tight = is_tight(share, lack, dim, blocks)
    desired = _desired_headroom(holding, blocks, dim, tight)
    headroom = min(desired, fair_headroom(share, lack, dim, blocks))
    left = total - need
    if left < 0:
        return _Sized(need + headroom, "topped-up")
    if left < refill_below(blocks, dim, demand) and not tight and need + headroom > total:
        return _Sized(need + headroom, "refilled")
    # A 0 is never sent: the gateway ignores it (semrush-user-manager.md).
    if left > high_water(blocks, dim) and tight and 0 < need + headroom < total:
        return _Sized(need + headroom, "rightsized")
    return _Sized(max(0, total), "hot-path")


# The per-brand ceiling: caps a top-up, never refuses one that fits.
CeilingValue = Annotated[int, Field(ge=0)]

_DIGITS = re.compile(r"[0-9]+")


class Ceiling(BaseModel):
    """A per-dimension cap on a child's totals; ``None`` or 0 leaves a dimension unenforced."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    projects: CeilingValue | None = None
    prompts: CeilingValue | None = None

    def limit(self, dim: Dimension) -> int | None:
        """The enforced cap of one dimension, or ``None`` when it is not enforced."""
        value: int | None = getattr(self, dim.value)
        return value if value is not None and value > 0 else None

    @property
    def is_enforced(self) -> bool:
        """True when at least one dimension is capped."""
        return any(self.limit(dim) is not None for dim in Dimension)

    def stricter(self, other: Ceiling | None) -> Ceiling:
        """Per dimension, the lower of the two enforced caps (an unenforced side does not count)."""
        if other is None:
            return self
        merged: dict[str, int | None] = {}
        for dim in Dimension:
            limits = [v for v in (self.limit(dim), other.limit(dim)) if v is not None]
            merged[dim.value] = min(limits) if limits else None
        return Ceiling(**merged)


NO_CEILING = Ceiling()


def combine_ceilings(*ceilings: Ceiling | None) -> Ceiling:
    """The strictest of several ceilings (messages of a coalesced run, the backstop)."""
    combined = NO_CEILING
    for ceiling in ceilings:
        combined = combined.stricter(ceiling)
    return combined


def parse_ceiling_value(raw: str | None) -> int | None:
    """An environment ceiling value: digits only and positive, else ``None`` (not enforced).

    ``None``, blank, ``5o00``, ``-5``, ``1e3``, ``0`` all give ``None``; ``" 500 "`` gives 500.
    """
    if raw is None:
        return None
    text = raw.strip()
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if value > 0 else None


def cap_to_ceiling(
    before: Totals, required: Totals, planned: Totals, ceiling: Ceiling | None
) -> Totals:
    """Hold a planned top-up under the ceiling without refusing a need that fits.

    Per raised dimension: a block-rounded target above the cap becomes the cap (which is at
    least the exact requirement); a requirement above the cap refuses the whole top-up.

    Args:
        before: The child's totals now.
        required: The exact totals the write needs (used, drafted when asked, plus the need).
        planned: The block-rounded totals the top-up would set.
        ceiling: The ceiling in force, or ``None``.

    Raises:
        BrandAiLimitError: The exact requirement of a raised dimension passes its cap.
    """
    if ceiling is None or not ceiling.is_enforced:
        return planned
    capped: dict[str, int] = {}
    for dim in Dimension:
        target, limit = planned.get(dim), ceiling.limit(dim)
        if limit is not None and target > before.get(dim) and target > limit:
            if required.get(dim) > limit:
                raise BrandAiLimitError(dim.value, required.get(dim), limit)
            target = max(limit, required.get(dim))
        capped[dim.value] = target
    return Totals(**capped)
