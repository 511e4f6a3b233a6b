"""What this container saw recently: a pool's free units and drain, a child's units on their way.

Both are the memory of one Lambda container, kept between its invocations and judged on the
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
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import AiResources, Dimension, Totals
from .observations import PoolLowWarning
from .ports import Clock


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
