"""The observer one ensure attempt reports through: verdicts count only when they stand.

Measurements (headroom checks, transfer latency, pool reads, not-ready retries) describe what
happened and go straight to the worker's observer. Verdicts (a rejection, a tight-pool
fallback's result) are held until the attempt's fate is known, because two things can overturn
them: a combined (coalesced) top-up that is refused falls back to one call per request, so no
request received the combined refusal; and an ensure parked for sibling reclaim is waiting, not
rejected (it may well be served on its next receive).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...domain.observations import VERDICTS, AllocationEvent, PoolChecked, PoolLowWarning
from ...domain.pool_watch import PoolWatch
from ..ports import WorkerObserver


@dataclass
class AttemptObserver:
    """The domain's ``AllocationObserver`` for one attempt; call :meth:`commit` or :meth:`discard`.

    Args:
        sink: The invocation's observer (metrics and logs).
        pool_watch: The container's pool early warning, fed by the advisory pool reads.
        warnings: The invocation's list of pool-low warnings to publish at the end.
    """

    sink: WorkerObserver
    pool_watch: PoolWatch | None
    warnings: list[PoolLowWarning]
    _held: list[AllocationEvent] = field(default_factory=list)

    def record(self, event: AllocationEvent, /) -> None:
        """Hold a verdict until the attempt's result stands; pass a measurement on at once.

        A pool read also feeds the pool early warning.
        """
        if isinstance(event, VERDICTS):
            self._held.append(event)
            return
        self.sink.record(event)
        if isinstance(event, PoolChecked) and self.pool_watch is not None:
            warning = self.pool_watch.observe(event.parent_id, event.pool)
            if warning is not None:
                self.warnings.append(warning)

    def commit(self) -> None:
        """The attempt's result stands: report the held verdicts, in order."""
        for event in self._held:
            self.sink.record(event)
        self._held.clear()

    def discard(self) -> None:
        """The attempt's result was overturned (split run, parked ensure): forget the verdicts."""
        self._held.clear()
