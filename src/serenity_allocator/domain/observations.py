"""The observer vocabulary: one frozen value per thing that happened, recorded through one method.

The rules report :data:`AllocationEvent` values through the domain's port
(:class:`.AllocationObserver`); the Allocator's use cases add the worker's own (below them, from
:class:`MessageStarted` on) and report every ``WorkerEvent`` through the application's
``WorkerObserver``. The values live here, beside
the other domain values, so the Powertools reporter (an adapter: it imports the domain only)
can map each type to its metric through one table checked against the metric catalog
(``adapters/observability.py``): a new measurement is a new value here and one row there.

``Rejected`` and ``TightPoolFallback`` are verdicts: the worker holds them until the attempt's
result stands (:class:`~serenity_allocator.application.allocator.apply_ensure.AttemptObserver`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .messages import AllocationOutcome
from .model import AiResources


@dataclass(frozen=True)
class HeadroomChecked:
    """One ensure finished the headroom check (``hot-path``, ``topped-up``, ``unmetered``)."""

    outcome: str


@dataclass(frozen=True)
class TransferTimed:
    """One transfer call on a path (``fail-fast`` or ``settle``) ended after ``latency_ms``.

    Accepted or refused alike; the call alone (no retry sleep, no settle poll).
    """

    path: str
    latency_ms: float


@dataclass(frozen=True)
class PoolChecked:
    """The advisory pool read of ``parent_id`` returned ``pool`` (free counts, ratios)."""

    parent_id: str
    pool: AiResources


@dataclass(frozen=True)
class Rejected:
    """An allocation was refused for ``reason`` (an error code). A verdict."""

    reason: str


@dataclass(frozen=True)
class NotReadyRetry:
    """A transfer met ``workspace not ready`` and will be retried."""


@dataclass(frozen=True)
class ReleaseFinished:
    """A release ended with ``outcome`` (``released``, ``nothing-to-release``, ...)."""

    outcome: str


@dataclass(frozen=True)
class TightPoolFallback:
    """The exact-totals fallback after a pool-exhausted top-up ``saved`` or ``rejected`` it.

    A verdict.
    """

    result: str


@dataclass(frozen=True)
class TieredWorkspaceMet:
    """A request met a workspace in the tiered prompt shape as its ``child`` or ``pool``.

    Counted whatever the request's fate (it says where the allocator is blind).
    """

    role: str


CredentialOutcomeName = Literal[
    "exchanged",
    "noCredential",
    "needsReauth",
    "accessDenied",
    "unauthorized",
    "imsUnavailable",
    "imsClientRefused",
    "semrushScopeMissing",
    "invalidateFailed",
]


@dataclass(frozen=True)
class CredentialOutcome:
    """What became of a request's (or a sweep run's) user authority: one count per occurrence.

    ``exchanged``: a session opened (promise exchanged, rolled token stored); the terminal
    ``noCredential``/``needsReauth``/``accessDenied``; ``unauthorized``: Semrush refused a fresh
    token with 401, the record comes back (a burst is a credential incident);
    ``imsUnavailable``: an exchange failed for now (429/5xx/timeout); ``imsClientRefused``: IMS
    refused the deployment's client pair (``invalid_client``: configuration, the record comes
    back); ``semrushScopeMissing``: an exchanged token without the ``semrush`` scope (the
    wrong pair: configuration, the record comes back); ``invalidateFailed``: IMS did not
    confirm the invalidation at the end (the outcome stands). ``reason`` is a code for the log
    line, never a token.
    """

    outcome: CredentialOutcomeName
    reason: str | None = None


AllocationEvent = (
    HeadroomChecked
    | TransferTimed
    | PoolChecked
    | Rejected
    | NotReadyRetry
    | ReleaseFinished
    | TightPoolFallback
    | TieredWorkspaceMet
    | CredentialOutcome
)
"""Everything the domain's rules report."""

VERDICTS = (Rejected, TightPoolFallback)
"""The events that judge an attempt (held until its result stands)."""


# The worker's own events, beside the rules': one frozen value each.
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


class PoolLowWarning(BaseModel):
    """One pool running low: the detail of a ``serenity.pool.low`` event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent_workspace_id: str
    dim: str
    free: int
    total: int
    free_ratio: float
    drain_units_per_hour: float | None
    """Estimated consumption rate; None until two reads are far enough apart."""
    projected_seconds_to_exhaustion: float | None


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
