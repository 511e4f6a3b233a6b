"""Is a parent metered? Learned from its family listing, cached per container with a TTL.

A parent whose ``ai`` product has ``limits_enabled: false`` does not meter AI writes, so
carving quota from it can only fail requests that would otherwise succeed
(semrush-user-manager.md, "Resource semantics").
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import WorkspaceRecord
from .ports import Clock, WorkspaceGateway


class ParentMeteringCache:
    """Answers ``is_unmetered(parent_id)`` from the family listing, cached for ``ttl_s``."""

    def __init__(self, gateway: WorkspaceGateway, clock: Clock, ttl_s: float) -> None:
        self._gateway = gateway
        self._clock = clock
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, bool]] = {}

    def is_unmetered(self, parent_id: str) -> bool:
        """True only when the parent's record says ``limits_enabled: false`` for ``ai``.

        An absent tier or flag counts as metered: the safe reading carves as before.
        """
        now = self._clock()
        cached = self._entries.get(parent_id)
        if cached is not None and now - cached[0] < self._ttl_s:
            return cached[1]
        return self.remember(parent_id, self._gateway.list_family(parent_id))

    def remember(self, parent_id: str, family: Sequence[WorkspaceRecord]) -> bool:
        """Learn the parent's metering from a family listing made elsewhere; return it."""
        record = next((r for r in family if r.id == parent_id), None)
        unmetered = record is not None and record.ai_limits_enabled is False
        self._entries[parent_id] = (self._clock(), unmetered)
        return unmetered
