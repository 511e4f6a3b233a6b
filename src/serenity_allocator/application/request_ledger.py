"""The request ledger in the worker: read once per batch, consulted, written once when terminal.

The decision and what "exactly once" means: docs/decisions/0009-request-ledger.md.

- :func:`read_ledger` looks up every valid request id of the batch in one consistent read, so
  requests that already have a final record are replayed, not applied (and not coalesced).
- :meth:`LedgerView.replay` gives a replayed request's stored outcome, published again as is.
- :func:`store_terminal` stores a terminal outcome once and returns what the ledger holds; a
  redrive's outcome is marked as superseding the dead letter it replaces.
- :func:`mark_final_receive` leaves a provisional dead letter as a final receive begins, so a
  request whose last receive crashes still ends with a terminal record.
- :func:`record_release_intent` and :func:`replay_release` carry a release's intent across a
  partial application.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..domain.errors import OutOfTimeError
from ..domain.ledger import (
    LedgerEntry,
    LedgerUnavailableError,
    ReleaseIntent,
    RequestLedger,
    replayed_release_outcome,
)
from ..domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from ..domain.model import Totals
from ..domain.outcomes import build_outcome

FINAL_RECEIVE_UNFINISHED = "finalReceiveUnfinished"
"""The error code of a provisional dead letter: the final receive never finished (a crash)."""


@dataclass
class LedgerView:
    """The ledger as this batch found it, plus what the batch wrote."""

    ledger: RequestLedger | None = None
    entries: dict[str, LedgerEntry] = field(default_factory=dict)
    error: LedgerUnavailableError | None = None
    """Set when the batch's lookup failed: every valid request then fails and comes back."""
    has_time: Callable[[bool], bool] = lambda _finishing: True
    """True while one ledger call, retries included, still fits the invocation; the argument
    asks for the finishing deadline (a dead letter may use the time kept for announcing)."""

    def replay(self, request_id: str) -> AllocationOutcome | None:
        """The stored final outcome of ``request_id``, or None when it must be applied."""
        entry = self.entries.get(request_id)
        if entry is None or not entry.is_replayable:
            return None
        return entry.outcome

    def intent(self, request_id: str) -> ReleaseIntent | None:
        """A release's intent recorded by an earlier delivery, if any."""
        entry = self.entries.get(request_id)
        return None if entry is None else entry.intent

    def store(self, outcome: AllocationOutcome) -> AllocationOutcome | None:
        """Store a terminal outcome once (see :func:`store_terminal`)."""
        return store_terminal(self, outcome)

    def check_available(self) -> None:
        """Raise the lookup's error, so the request fails for now and SQS brings it back.

        Raises:
            LedgerUnavailableError: the batch could not read the ledger.
        """
        if self.error is not None:
            raise self.error


def read_ledger(ledger: RequestLedger | None, request_ids: Iterable[str]) -> LedgerView:
    """Look up the batch's request ids once (consistent read); never raises."""
    view = LedgerView(ledger)
    ids = list(dict.fromkeys(request_ids))
    if ledger is None or not ids:
        return view
    try:
        view.entries = ledger.lookup(ids)
    except LedgerUnavailableError as exc:
        view.error = exc
    return view


def store_terminal(view: LedgerView, outcome: AllocationOutcome) -> AllocationOutcome | None:
    """Store ``outcome`` once; return the outcome to publish (the ledger's, if one existed).

    Called through :meth:`LedgerView.store` (by :meth:`.OutcomeBook.record`). Nothing is ever
    published that the ledger does not hold: a dead-lettered outcome the ledger cannot take
    returns None (not announced; the message is on its way to the DLQ, where the provisional
    dead letter of its final receive, if written, stands); any other outcome raises (the
    request fails and comes back).

    Raises:
        LedgerUnavailableError: a completed request's outcome could not be stored.
        OutOfTimeError: the write would not fit before the deadline (the record comes back).
    """
    if view.ledger is None:
        return outcome
    dead = bool(outcome.dead_lettered)
    if not view.has_time(dead):
        # Never let a write outlive the function (a timeout would replay the whole batch).
        if dead:
            return None
        raise OutOfTimeError()
    entry = view.entries.get(outcome.request_id)
    outcome = _superseding(entry, outcome)
    try:
        held = view.ledger.store_outcome(outcome, dead_lettered=dead)
    except LedgerUnavailableError:
        if dead:
            return None
        raise
    view.entries[outcome.request_id] = _terminal_entry(outcome.request_id, held, entry)
    return held


def _superseding(entry: LedgerEntry | None, outcome: AllocationOutcome) -> AllocationOutcome:
    """A redrive's outcome, marked as replacing the dead letter the ledger had announced."""
    if entry is not None and entry.was_announced_dead and not outcome.dead_lettered:
        return outcome.model_copy(update={"supersedes": "deadLettered"})
    return outcome


def _terminal_entry(
    request_id: str, held: AllocationOutcome, earlier: LedgerEntry | None
) -> LedgerEntry:
    """The batch's copy of the record just stored; a release keeps its recorded intent."""
    return LedgerEntry(
        request_id=request_id,
        state="deadLettered" if held.dead_lettered else "final",
        outcome=held,
        intent=earlier.intent if earlier is not None else None,
    )


def mark_final_receive(
    view: LedgerView, request: EnsureRequest | ReleaseRequest, receive_count: int
) -> None:
    """Leave a provisional dead letter before a final receive applies anything.

    It stands only if this receive never completes (the function crashes or times out): SQS
    then moves the message to the DLQ and readers see a dead-lettered outcome. When the
    receive completes, its own terminal outcome replaces it.

    Raises:
        LedgerUnavailableError: the ledger could not be written (the request comes back).
    """
    if view.ledger is None:
        return
    outcome = build_outcome(
        request, "failed", receive_count, error_code=FINAL_RECEIVE_UNFINISHED
    ).model_copy(update={"dead_lettered": True})
    view.ledger.store_outcome(outcome, provisional=True)


def record_release_intent(
    view: LedgerView, request_id: str, before: Totals, target: Totals
) -> None:
    """Record a release's transfer before it is sent (a no-op without a ledger).

    Raises:
        LedgerConflictError: the request has a terminal record already.
        LedgerUnavailableError: the ledger could not be written (nothing was transferred).
        OutOfTimeError: the write would not fit before the deadline (nothing was transferred).
    """
    if view.ledger is None:
        return
    if not view.has_time(False):
        raise OutOfTimeError()
    intent = ReleaseIntent(before=before, target=target)
    view.ledger.record_intent(request_id, intent)
    entry = view.entries.get(request_id)
    if entry is None or not entry.is_terminal:
        view.entries[request_id] = LedgerEntry(request_id=request_id, state="intent", intent=intent)


def replay_release(
    view: LedgerView, request: ReleaseRequest, current: Totals, template: AllocationOutcome
) -> AllocationOutcome | None:
    """The ``released`` outcome of an earlier delivery whose transfer landed, or None."""
    intent = view.intent(request.request_id)
    if intent is None:
        return None
    return replayed_release_outcome(intent, current, template)
