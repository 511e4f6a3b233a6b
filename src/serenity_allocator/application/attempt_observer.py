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
from typing import Literal

from ..domain.model import AiResources
from ..domain.pool_watch import PoolLowWarning, PoolWatch
from .ports import WorkerObserver

_Verdict = tuple[Literal["rejected", "tight-pool-fallback"], str]


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
    _held: list[_Verdict] = field(default_factory=list)

    def headroom_checked(self, outcome: str) -> None:
        """Pass on: a headroom check happened whatever the request's fate."""
        self.sink.headroom_checked(outcome)

    def transfer_timed(self, path: str, latency_ms: float) -> None:
        """Pass on: the transfer call happened."""
        self.sink.transfer_timed(path, latency_ms)

    def pool_checked(self, parent_id: str, pool: AiResources) -> None:
        """Pass on, and feed the pool early warning."""
        self.sink.pool_checked(parent_id, pool)
        if self.pool_watch is not None:
            warning = self.pool_watch.observe(parent_id, pool)
            if warning is not None:
                self.warnings.append(warning)

    def not_ready_retry(self) -> None:
        """Pass on: the retry happened."""
        self.sink.not_ready_retry()

    def release_finished(self, outcome: str) -> None:
        """Pass on (an ensure never releases; kept for the port)."""
        self.sink.release_finished(outcome)

    def tiered_met(self, role: str) -> None:
        """Pass on: the read met a tiered workspace whatever the request's fate."""
        self.sink.tiered_met(role)

    def rejected(self, reason: str) -> None:
        """Hold: a rejection counts only if the attempt's result stands."""
        self._held.append(("rejected", reason))

    def tight_pool_fallback(self, result: str) -> None:
        """Hold: the fallback's result counts only if the attempt's result stands."""
        self._held.append(("tight-pool-fallback", result))

    def commit(self) -> None:
        """The attempt's result stands: report the held verdicts."""
        for kind, value in self._held:
            if kind == "rejected":
                self.sink.rejected(value)
            else:
                self.sink.tight_pool_fallback(value)
        self._held.clear()

    def discard(self) -> None:
        """The attempt's result was overturned (split run, parked ensure): forget the verdicts."""
        self._held.clear()
