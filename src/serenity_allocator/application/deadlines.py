"""The invocation's deadlines: the one answer to "does this call still fit?".

Two phases. While applying, every upstream call and every AWS call made for a request (DLQ
sends, ledger writes, reclaim enqueues) ends by ``applying``, which keeps one AWS call per
publish chunk in reserve; once every record was handed over, announcing the batch (publishing,
the ledger writes of skipped final receives) may use the time up to ``finishing``.

An IMS exchange spends the promise token it is sent with, so one is started only when a whole
exchange (and storing the rolled token) still fits before ``finishing``: our own deadline never
cuts an exchange short and loses its answer (ADR 0016). Not before ``applying``: an exchange
takes milliseconds when IMS is well, and the Semrush calls after it check their own time, so a
request whose calls then do not fit comes back with its rolled token (kept, not spent). Holding
a whole IMS timeout plus the publish reserve before ``applying`` refused exchanges on healthy
consumers that had most of their time left (issue 36 item 1).

The batch's ledger calls keep the same two phases on the same clock (:class:`LedgerDeadlines`):
the lookup before applying is over by ``applying``, a dead letter's store may use the time up
to ``finishing``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..domain.ledger import CallDeadline
from ..domain.ports import Clock, Sleeper


@dataclass
class Deadlines:
    """Monotonic deadlines of one invocation and the worst case of one AWS call."""

    clock: Clock
    applying: float
    """By when applying must be over (upstream calls, and AWS calls made for a request)."""
    finishing: float
    """By when the invocation must be done (the remaining time less the safety margin)."""
    aws_call_s: float
    """The longest one AWS call (publish, DLQ send, ledger write, enqueue) can take, retries
    included."""
    ims_call_s: float = 0.0
    """The longest one IMS exchange can take (one attempt at the IMS client's timeout)."""
    announcing: bool = False
    """Set once every record was handed over: what is left is announcing the batch."""

    @classmethod
    def for_batch(
        cls,
        clock: Clock,
        *,
        finish_by: float,
        publish_calls: int,
        aws_call_s: float,
        ims_call_s: float = 0.0,
    ) -> Deadlines:
        """Applying ends early enough to leave ``publish_calls`` AWS calls before ``finish_by``."""
        return cls(
            clock=clock,
            applying=finish_by - publish_calls * aws_call_s,
            finishing=finish_by,
            aws_call_s=aws_call_s,
            ims_call_s=ims_call_s,
        )

    def fits_aws_call(self, finishing: bool = False) -> bool:
        """True when one AWS call, retries included, still fits before the phase's deadline.

        ``finishing`` asks for the invocation's own deadline (a dead letter, or any call once
        the batch is being announced); otherwise the time kept for publishing is not available.
        """
        limit = self.finishing if finishing or self.announcing else self.applying
        return self.clock() + self.aws_call_s <= limit

    def fits_ims_exchange(self) -> bool:
        """True when a whole IMS exchange and the store of its rolled token fit the invocation.

        Before ``finishing``, the invocation's own deadline, which the sessions' threads are
        waited for by: a full IMS timeout is kept, never a shortened one, and the exchange is
        refused only when it really could not finish.
        """
        return self.clock() + self.ims_call_s + self.aws_call_s <= self.finishing

    def start_announcing(self) -> None:
        """Every record was handed over: from now on calls may use the finishing deadline."""
        self.announcing = True


# The batch's ledger calls: the lookup over before applying, every write by its phase's end.


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
