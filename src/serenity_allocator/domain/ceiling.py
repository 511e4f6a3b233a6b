"""The per-brand ceiling: a runaway circuit breaker that never refuses a write that fits.

Facts (semrush-user-manager.md, "The per-brand ceiling"): one global backstop per environment,
one value per dimension, each optional. An omitted dimension is NOT enforced (never read as 0);
an unset, malformed or non-positive value leaves it unenforced (a configuration typo must never
break a customer write), and only digits parse (``5o00`` must not become 5). With a message's
ceiling and the environment's backstop both set, the stricter applies.

The ceiling caps a top-up, it does not refuse one that fits: when the block-rounded target
passes the ceiling but the exact need fits, the child is topped up to the ceiling instead;
``brandAiLimit`` only when the exact need itself passes it.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from .errors import BrandAiLimitError
from .model import Dimension, Totals

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
