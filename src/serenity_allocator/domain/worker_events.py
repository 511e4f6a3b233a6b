"""The worker's own events, beside the rules' (:mod:`.observations`): one frozen value each.

The Allocator's use cases record them, with the rules' events, through the application's
``WorkerObserver``; the Powertools reporter maps each type to its metric or log line in one
table (``adapters/observability.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .messages import AllocationOutcome
from .observations import AllocationEvent, CredentialOutcome
from .pool_watch import PoolLowWarning

LedgerEventName = Literal[
    "replayed", "deadLettered", "superseded", "duplicate", "unreadable", "requestIdConflict"
]
ReclaimResult = Literal["enqueued", "parked", "served", "exhausted"]


@dataclass(frozen=True)
class MessageStarted:
    """A record is being handled: later reports carry these keys."""

    message_id: str
    workspace_id: str
    request_id: str | None
    kind: str | None
    receive_count: int


@dataclass(frozen=True)
class QueueLag:
    """Time the record waited on the queue before this receive."""

    lag_ms: float


@dataclass(frozen=True)
class InvalidMessage:
    """A record failed validation (it goes to the DLQ with ``reason``)."""

    reason: str


@dataclass(frozen=True)
class DisabledNoop:
    """An ensure completed without a call because dynamic allocation is off."""


@dataclass(frozen=True)
class Coalesced:
    """One combined top-up also served ``extra_requests`` requests behind its leader."""

    extra_requests: int


@dataclass(frozen=True)
class Reclaim:
    """A sibling-reclaim step: ``enqueued`` (``count`` releases), ``parked``, ``served``..."""

    result: ReclaimResult
    count: int = 1


@dataclass(frozen=True)
class ParkedForReclaim:
    """An ensure waits for releases enqueued on ``siblings``."""

    siblings: tuple[str, ...]


@dataclass(frozen=True)
class Completed:
    """A request reached its terminal outcome."""

    outcome: AllocationOutcome


@dataclass(frozen=True)
class LedgerEvent:
    """A request ledger event happened to a request.

    ``replayed``: a stored outcome published again, nothing applied; ``deadLettered``: a
    terminal dead letter stored; ``superseded``: a redrive replaced a dead letter;
    ``duplicate``: a second record of one request id in a batch, not applied; ``unreadable``:
    its record could not be read (the request fails alone); ``requestIdConflict``: its id is
    bound to another request (refused, nothing applied).
    """

    event: LedgerEventName


@dataclass(frozen=True)
class WillRetry:
    """A request failed for now; SQS brings it back (or, on the final receive, the DLQ).

    ``expected`` is False for a failure no rule foresaw (a bug: log it with its trace).
    """

    error_code: str
    final_receive: bool
    expected: bool
    error: Exception


@dataclass(frozen=True)
class RecordFailed:
    """A record is reported to SQS as failed (it comes back), with why: one log line each.

    ``record`` holds that record's own keys: the line is written after later records ran, so
    the keys the logger holds then are another record's.
    """

    record: MessageStarted
    reason: str

    @property
    def message_id(self) -> str:
        """The failed record's SQS message id."""
        return self.record.message_id

    @property
    def request_id(self) -> str | None:
        """The failed record's request id (None: its body has no readable one)."""
        return self.record.request_id


@dataclass(frozen=True)
class OutcomesNotPublished:
    """A chunk of outcomes could not be published; its requests will be retried."""

    error: Exception


@dataclass(frozen=True)
class PoolLow:
    """An org pool is running low (advisory)."""

    warning: PoolLowWarning


@dataclass(frozen=True)
class PoolLowNotPublished:
    """A pool-low event could not be published (advisory; requests are unaffected)."""

    error: Exception


@dataclass(frozen=True)
class CredentialNotScrubbed:
    """A terminal request's record kept its token (the scrub failed or did not fit).

    It expires with the record's TTL. ``reason`` is an AWS code or ``outOfTime``.
    """

    request_id: str
    reason: str


WorkerEvent = (
    AllocationEvent
    | MessageStarted
    | QueueLag
    | InvalidMessage
    | DisabledNoop
    | Coalesced
    | Reclaim
    | ParkedForReclaim
    | Completed
    | LedgerEvent
    | WillRetry
    | RecordFailed
    | OutcomesNotPublished
    | PoolLow
    | PoolLowNotPublished
    | CredentialOutcome
    | CredentialNotScrubbed
)
"""Everything the Allocator reports."""
