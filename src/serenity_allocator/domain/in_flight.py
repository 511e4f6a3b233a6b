"""Units a child's recent ensures made room for that its use does not show yet.

A guard sends its front before it writes, so two requests on one child a second apart are two
ensures a second apart, each read against ``used + drafted``: the second cannot see the units
the first made room for, finds them free, and its writes take them (or wait for a top-up that
comes a whole gate lag later). The container remembers what it served for each child, and an
ensure counts what of that the child's use has not grown by yet as part of its need. A front
older than :data:`IN_FLIGHT_S` was written or given up by its guard and counts no more.

Memory of one container, like the pool watch: a child's messages served by another container
are not seen here, which leaves that ensure as it was before (the safe side of over-carving).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Dimension, Totals
from .ports import Clock

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
