"""When the batch's ledger calls must be over: the lookup before applying, every write after."""

from __future__ import annotations

from dataclasses import dataclass

from ..domain.ledger import CallDeadline
from ..domain.ports import Clock, Sleeper


@dataclass(frozen=True)
class LedgerDeadlines:
    """When the batch's ledger calls must be over, on the invocation's clock.

    Args:
        clock: The invocation's monotonic clock.
        sleep: Waits between retries of throttled reads.
        apply_by: The applying deadline (leaves the outcome publish its time).
        finish_by: The invocation's own deadline (a dead letter may use the publish's time).
        call_budget_s: The longest one ledger call may take, its client's retries included.
    """

    clock: Clock
    sleep: Sleeper
    apply_by: float
    finish_by: float
    call_budget_s: float

    def has_time(self, finishing: bool) -> bool:
        """True while one ledger call still fits before the phase's deadline."""
        limit = self.finish_by if finishing else self.apply_by
        return self.clock() + self.call_budget_s <= limit

    def lookup_deadline(self) -> CallDeadline:
        """The batch lookup's deadline: over before applying must be."""
        return CallDeadline(self.clock, self.sleep, self.apply_by, self.call_budget_s)
