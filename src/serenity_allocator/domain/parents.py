"""What the upstream says of a parent: is it metered, is it the child's parent? Cached.

Both answers come from the parent's family listing (one call serves both: the links learn from
every listing and hand it to the metering cache).

Metering: a parent whose ``ai`` product has ``limits_enabled: false`` does not meter AI writes,
so carving quota from it can only fail requests that would otherwise succeed
(semrush-user-manager.md, "Resource semantics"); learned per container with a TTL.

Links: a message's ``parent_workspace_id`` is the pool a top-up carves from and whose
metering decides the unmetered shortcut, so trusting it would let a message move another org's
quota. The truth is the upstream's family listing (each record names its ``parent_id``). A
child is created under its parent and the API has no operation that moves it
(semrush-user-manager.md lists none), so a container caches every link it has seen, for its
whole life.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


PARENT_MISMATCH = "parentMismatch"


class ParentMismatchError(Exception):
    """The message names a parent that is not the child's parent upstream: it is invalid."""

    code = PARENT_MISMATCH

    def __init__(self) -> None:
        super().__init__(
            f"{PARENT_MISMATCH}: parent_workspace_id is not the parent of workspace_id"
        )


class ParentLinks:
    """Answers ``is_parent_of(parent, child)`` from family listings, caching every link seen.

    Args:
        gateway: Lists families.
        on_listing: Told of every listing made (the metering cache learns from it, so one
            call serves both questions).
    """

    def __init__(
        self,
        gateway: WorkspaceGateway,
        on_listing: Callable[[str, Sequence[WorkspaceRecord]], object] | None = None,
    ) -> None:
        self._gateway = gateway
        self._on_listing = on_listing
        self._parent_of: dict[str, str | None] = {}
        self._children: dict[str, set[str]] = {}
        """Parent -> the children the listings named (kept with the links, not scanned for)."""

    def is_parent_of(self, parent_id: str, child_id: str) -> bool:
        """True only when the upstream lists ``child_id`` with ``parent_id`` as its parent.

        A miss lists the claimed parent's family (one call) and caches every link in it; a
        child absent from that family is not cached, so a child created later is found later.
        """
        if child_id == parent_id:
            return False
        if child_id not in self._parent_of:
            family = self._gateway.list_family(parent_id)
            for record in family:
                self._parent_of[record.id] = record.parent_id
                if record.parent_id is not None:
                    self._children.setdefault(record.parent_id, set()).add(record.id)
            if self._on_listing is not None:
                self._on_listing(parent_id, family)
        return self._parent_of.get(child_id) == parent_id

    def children_of(self, parent_id: str) -> int:
        """How many children of ``parent_id`` the listings seen so far name (at least 1).

        Asked after :meth:`is_parent_of` answered for a child of it, so its family was listed
        at least once in this container; a child created since is counted at the next miss.
        """
        return max(1, len(self._children.get(parent_id, ())))
