"""What this container remembers: pools, children's units on their way, and parents.

Each is the memory of one Lambda container, kept between its invocations and judged on the
injected clock; a child or a pool served by another container is not seen here, which leaves
the rule that asks as it would be without it (the safe side).

- :class:`PoolWatch`: each pool's drain rate estimated from the ensure path's advisory reads;
  warns once per pool per interval (never per message) when the free ratio falls under a
  threshold, with a projected time to exhaustion; and the pool's free units at its last read.
- :class:`InFlightUnits`: the units a child's recent ensures made room for that its use does
  not show yet. A guard sends its front before it writes, so two requests on one child a
  second apart are two ensures a second apart, each read against ``used + drafted``: the
  second cannot see the units the first made room for, finds them free, and its writes take
  them (or wait for a top-up that comes a whole gate lag later). The container remembers what
  it served for each child, and an ensure counts what of that the child's use has not grown by
  yet as part of its need. A front older than :data:`IN_FLIGHT_S` was written or given up by
  its guard and counts no more.
- :class:`ParentLinks` and :class:`ParentMeteringCache` (at the end): what the upstream says of
  a parent, from its family listing (one call serves both answers). Links: a message's
  ``parent_workspace_id`` is the pool a top-up carves from, so trusting it would let a message
  move another org's quota; the truth is the family listing (each record names its
  ``parent_id``). A child is created under its parent and the API has no operation that moves
  it (semrush-user-manager.md lists none), so a link seen is cached. Metering: a parent whose
  ``ai`` product has ``limits_enabled: false`` does not meter AI writes, so carving quota from
  it can only fail requests that would otherwise succeed ("Resource semantics"); learned with
  a TTL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .model import AiResources, Dimension, Totals, WorkspaceRecord
from .observations import PoolLowWarning
from .ports import Clock, WorkspaceGateway


class PoolWatch:
    """Per-pool drain estimate and once-per-interval low-pool warnings."""

    _SMOOTHING = 0.3  # weight of the newest rate sample in the moving average

    def __init__(self, clock: Clock, *, threshold: float, interval_s: float) -> None:
        self._clock = clock
        self._threshold = threshold
        self._interval_s = interval_s
        self._last: dict[tuple[str, Dimension], tuple[float, int]] = {}
        self._rate: dict[tuple[str, Dimension], float] = {}
        self._warned_at: dict[str, float] = {}

    def observe(self, parent_id: str, pool: AiResources) -> PoolLowWarning | None:
        """Update the estimate with one read; return a warning when one is due."""
        now = self._clock()
        worst: PoolLowWarning | None = None
        for dim in Dimension:
            usage = pool.get(dim)
            self._update_rate((parent_id, dim), now, usage.free)
            if usage.total <= 0:
                continue
            ratio = usage.free / usage.total
            if ratio >= self._threshold or (worst is not None and ratio >= worst.free_ratio):
                continue
            worst = self._warning(parent_id, dim, usage.free, usage.total)
        if worst is None:
            return None
        last = self._warned_at.get(parent_id)
        if last is not None and now - last < self._interval_s:
            return None
        self._warned_at[parent_id] = now
        return worst

    def last_free(self, parent_id: str) -> Totals | None:
        """The free units of ``parent_id`` at its last read in this container, if any."""
        free = {dim: self._last.get((parent_id, dim)) for dim in Dimension}
        if any(seen is None for seen in free.values()):
            return None
        return Totals(**{dim.value: max(0, seen[1]) for dim, seen in free.items() if seen})

    def _warning(self, parent_id: str, dim: Dimension, free: int, total: int) -> PoolLowWarning:
        rate = self._rate.get((parent_id, dim))
        return PoolLowWarning(
            parent_workspace_id=parent_id,
            dim=dim.value,
            free=free,
            total=total,
            free_ratio=round(free / total, 4),
            drain_units_per_hour=None if rate is None else round(rate * 3600, 2),
            projected_seconds_to_exhaustion=(
                None if not rate or rate <= 0 else round(max(free, 0) / rate, 1)
            ),
        )

    def _update_rate(self, key: tuple[str, Dimension], now: float, free: int) -> None:
        previous = self._last.get(key)
        self._last[key] = (now, free)
        if previous is None or now - previous[0] <= 0:
            return
        sample = (previous[1] - free) / (now - previous[0])  # units drained per second
        old = self._rate.get(key)
        self._rate[key] = (
            sample if old is None else (self._SMOOTHING * sample + (1 - self._SMOOTHING) * old)
        )


IN_FLIGHT_S = 20.0
"""How long a served ensure's units count as on their way: a guard's default deadline."""


@dataclass(frozen=True)
class _Served:
    """One served ensure: when, the child's use then, and the units it made room for."""

    at: float
    in_use: Totals
    need: Totals


class InFlightUnits:
    """Per child, the ensures this container served within :data:`IN_FLIGHT_S`."""

    def __init__(self, clock: Clock, window_s: float = IN_FLIGHT_S) -> None:
        self._clock = clock
        self._window_s = window_s
        self._served: dict[str, list[_Served]] = {}

    def pending(self, child_id: str, in_use: Totals) -> Totals:
        """Units served for ``child_id`` that its use (``in_use`` now) does not show yet.

        What the live ensures asked, less what the child's use grew by since the oldest of
        them was served; never below 0.
        """
        served = self._live(child_id)
        if not served:
            return Totals()
        pending = {}
        for dim in Dimension:
            asked = sum(s.need.get(dim) for s in served)
            grown = in_use.get(dim) - min(s.in_use.get(dim) for s in served)
            pending[dim.value] = max(0, asked - max(0, grown))
        if not any(pending.values()):
            self._served.pop(child_id, None)  # all written: start afresh
        return Totals(**pending)

    def note(self, child_id: str, in_use: Totals, need: Totals) -> None:
        """Remember a served ensure of ``need`` on ``child_id`` whose use was ``in_use``."""
        if any(need.get(dim) > 0 for dim in Dimension):
            self._served[child_id] = [*self._live(child_id), _Served(self._clock(), in_use, need)]
        self._drop_expired()

    def forget(self, child_id: str) -> None:
        """Nothing of ``child_id``'s is on its way any more (a release handed its surplus back)."""
        self._served.pop(child_id, None)

    def _drop_expired(self) -> None:
        """Forget the children touched longest ago whose ensures all expired.

        The dict is in the order children were last touched (``_live`` moves one to the end),
        so a container serving many children keeps only the recent ones.
        """
        since = self._clock() - self._window_s
        for child_id, served in list(self._served.items()):
            if served[-1].at > since:
                return
            del self._served[child_id]

    def _live(self, child_id: str) -> list[_Served]:
        since = self._clock() - self._window_s
        live = [s for s in self._served.pop(child_id, []) if s.at > since]
        if live:
            self._served[child_id] = live
        return live


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
