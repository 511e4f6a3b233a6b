"""Pool early warning: estimate each pool's drain rate from the advisory reads.

Fed by the ensure path's advisory pool reads; warns once per pool per interval (never per
message) when the free ratio falls under a threshold, with a projected time to exhaustion.
"""

from __future__ import annotations

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
