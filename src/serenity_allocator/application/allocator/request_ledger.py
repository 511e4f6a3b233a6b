"""The request ledger in the worker: read once per batch, consulted, written once when terminal.

The decision and what "exactly once" means: docs/decisions/0009-request-ledger.md.

- :func:`read_ledger` looks up every request id of the batch (an invalid message's too, when
  it reads) in one consistent read, bounded by the applying deadline (throttled keys are
  retried with backoff inside it), so requests that already have a final record are replayed,
  not applied (and not coalesced).
- :meth:`LedgerView.decide` answers, in one call, what the worker does with a request before
  applying it: :class:`Refuse` one whose id is bound to another workspace or kind (in the
  ledger or earlier in the batch: ``requestIdConflict``), :class:`FollowFirst` for a later copy
  of a request in the batch, :class:`Replay` one with a final record, or with a dead letter
  this same message sent itself (ADR 0020; :func:`replay_invalid` for an invalid message's):
  its stored outcome, published again as is; else :class:`Apply`, once its record was read
  (:meth:`LedgerView.check`) and, on a final receive, its provisional dead letter written.
- :meth:`LedgerView.landed` tells a redelivery whether the transfer an earlier delivery
  recorded has landed (an ensure's and a release's alike), reading its intent once.
- :func:`store_terminal` stores a terminal outcome once and returns what the ledger holds; a
  redrive's outcome is marked as superseding the dead letter it replaces.
- :func:`mark_final_receive` leaves a provisional dead letter as a final receive begins, so a
  request whose last receive crashes still ends with a terminal record.
- :func:`record_transfer_intent` and :meth:`LedgerView.landed` carry a transfer's intent across
  a partial application.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ...domain.errors import OutOfTimeError
from ...domain.ledger import (
    LedgerEntry,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
    RequestIdConflictError,
    RequestLedger,
    TransferIntent,
)
from ...domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest, build_outcome
from ...domain.model import Totals
from ...domain.ports import WorkspaceGateway
from ..deadlines import LedgerDeadlines

FINAL_RECEIVE_UNFINISHED = "finalReceiveUnfinished"
"""The error code of a provisional dead letter: the final receive never finished (a crash)."""
REQUEST_ID_CONFLICT = RequestIdConflictError.code
"""The error code of a request refused because its id is bound to another workspace or kind."""

Request = EnsureRequest | ReleaseRequest


@dataclass(frozen=True)
class Refuse:
    """The id is bound to another workspace or kind: this ``rejected`` outcome, never stored."""

    outcome: AllocationOutcome


@dataclass(frozen=True)
class FollowFirst:
    """A later copy of a request earlier in the batch: it ends with the first copy."""


@dataclass(frozen=True)
class Replay:
    """A stored outcome to publish again: nothing applied, nothing dead-lettered again.

    A final record's, or a dead letter's this same message sent itself (ADR 0020).
    """

    outcome: AllocationOutcome


@dataclass(frozen=True)
class Apply:
    """The record read answers nothing for the request: apply it."""


LedgerDecision = Refuse | FollowFirst | Replay | Apply


@dataclass
class LedgerView:
    """The ledger as this batch found it, plus what the batch wrote."""

    ledger: RequestLedger | None = None
    deadlines: LedgerDeadlines | None = None
    """None: calls are not bounded here (no ledger, or an operator tool's own bounds)."""
    entries: dict[str, LedgerEntry] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Request id -> why its record cannot be read (field names only)."""
    unanswered: set[str] = field(default_factory=set)
    """Ids the lookup could not read before its deadline (throttling): they fail for now."""
    error: LedgerUnavailableError | OutOfTimeError | None = None
    """Set when the batch's lookup failed: every valid request then fails and comes back."""
    sequence_numbers: Mapping[str, str] = field(default_factory=dict)
    """Message id -> its SQS SequenceNumber: the order key (ADR 0018) a provisional dead letter
    carries, so the DLQ audit that confirms it announces it in its child's order."""
    marked: set[str] = field(default_factory=set)
    """Request ids whose provisional dead letter this batch wrote already (at its start)."""

    def has_time(self, finishing: bool) -> bool:
        """True while one ledger call, retries included, still fits the invocation.

        ``finishing`` asks for the finishing deadline (a dead letter may use the publish's time).
        """
        return self.deadlines is None or self.deadlines.has_time(finishing)

    def conflicts(self, request: Request) -> bool:
        """True when the request's id is bound to another workspace or kind."""
        entry = self.entries.get(request.request_id)
        return entry is not None and not entry.belongs_to(request.workspace_id, request.kind)

    def decide(
        self,
        request: Request,
        *,
        message_id: str | None = None,
        first: Request | None,
        receive_count: int,
        final_receive: bool,
    ) -> LedgerDecision:
        """What the worker does with ``request`` before applying anything; one answer.

        ``first`` is the request of an earlier record of the batch with the same id (None: this
        is the first). The questions, in order: is the id bound elsewhere (in the ledger, or to
        ``first``), is this a later copy, is there a final record or a dead letter this same
        message (``message_id``) sent itself (a redelivery after a crash, ADR 0020), was the
        record read; on a final receive (``final_receive``) a provisional dead letter goes to
        the ledger before :class:`Apply` is answered, so a crash from there on still leaves a
        terminal record.

        Raises:
            LedgerUnavailableError, OutOfTimeError, LedgerRecordUnreadableError: the record
                was not read (:meth:`check`), or the provisional dead letter not written.
        """
        # The record's two questions asked together: is the id bound elsewhere, does this
        # delivery replay it.
        entry = self.entries.get(request.request_id)
        bound_elsewhere = entry is not None and not entry.belongs_to(
            request.workspace_id, request.kind
        )
        replayed = (
            entry.outcome if entry is not None and entry.is_replayed_for(message_id) else None
        )
        bound_elsewhere = bound_elsewhere or (
            first is not None
            and (first.workspace_id, first.kind) != (request.workspace_id, request.kind)
        )
        if not bound_elsewhere:
            if first is not None:
                return FollowFirst()
            if replayed is not None:
                return Replay(replayed)
            return self._admit(request, message_id, receive_count, final_receive)
        return Refuse(
            build_outcome(request, "rejected", receive_count, error_code=REQUEST_ID_CONFLICT)
        )

    def _admit(
        self, request: Request, message_id: str | None, receive_count: int, final_receive: bool
    ) -> Apply:
        """Apply a request whose id is its own, once its record was read."""
        self.check(request.request_id)
        if final_receive and request.request_id not in self.marked:
            sequence_number = self.sequence_numbers.get(message_id or "")
            mark_final_receive(self, request, receive_count, sequence_number)
        return Apply()

    def landed(self, request: Request, gateway: WorkspaceGateway) -> TransferIntent | None:
        """The transfer an earlier delivery recorded and made, or None: apply the request.

        Only a request whose recorded intent moves something pays this extra read (a
        redelivery after its transfer may have landed); a first delivery reads the child once,
        in its rule. The same answer for an ensure and a release: :meth:`TransferIntent.landed`.
        """
        entry = self.entries.get(request.request_id)
        intent = None if entry is None else entry.intent
        if intent is None or not intent.moves:
            return None
        current = gateway.read_resources(request.workspace_id).totals()
        return intent if intent.landed(current) else None

    def answered(self, requests: Iterable[Request]) -> frozenset[str]:
        """Ids of ``requests`` this batch must not apply nor coalesce.

        Replayed ones, ones bound to another request, unreadable or unanswered ones.
        """
        kept = set(self.unreadable) | self.unanswered
        for request in requests:
            entry = self.entries.get(request.request_id)
            if entry is not None and (entry.is_replayable or self.conflicts(request)):
                kept.add(request.request_id)
        return frozenset(kept)

    def store(
        self,
        outcome: AllocationOutcome,
        completing_message_id: str | None = None,
        *,
        finishing: bool = False,
    ) -> AllocationOutcome | None:
        """Store a terminal outcome once (see :func:`store_terminal`)."""
        return store_terminal(self, outcome, completing_message_id, finishing=finishing)

    def check(self, request_id: str) -> None:
        """Raise why this request cannot be applied now, if its record was not read.

        Raises:
            LedgerUnavailableError: the lookup failed, or left this id unanswered (throttled
                until its deadline): the request fails for now and SQS brings it back.
            OutOfTimeError: the lookup did not fit the invocation.
            LedgerRecordUnreadableError: the request's record does not parse: nothing is
                applied or written over it (docs/runbooks/request-ledger.md).
        """
        if self.error is not None:
            raise self.error
        if request_id in self.unanswered:
            raise LedgerUnavailableError("unprocessed keys until the deadline")
        if request_id in self.unreadable:
            raise LedgerRecordUnreadableError(self.unreadable[request_id])


def read_ledger(
    ledger: RequestLedger | None,
    request_ids: Iterable[str],
    deadlines: LedgerDeadlines | None = None,
) -> LedgerView:
    """Look up the batch's request ids once (consistent read) inside the deadline; never raises."""
    view = LedgerView(ledger, deadlines)
    ids = list(dict.fromkeys(request_ids))
    if ledger is None or not ids:
        return view
    if not view.has_time(False):
        view.error = OutOfTimeError()
        return view
    try:
        read = ledger.read_batch(ids, deadlines.lookup_deadline() if deadlines else None)
    except LedgerUnavailableError as exc:
        view.error = exc
        return view
    view.entries, view.unreadable, view.unanswered = read.entries, read.unreadable, read.unanswered
    return view


def store_terminal(
    view: LedgerView,
    outcome: AllocationOutcome,
    completing_message_id: str | None = None,
    *,
    finishing: bool = False,
) -> AllocationOutcome | None:
    """Store ``outcome`` once; return the outcome to publish (the ledger's, if one existed).

    ``completing_message_id``: the message whose record completes with ``outcome``; a dead
    letter is then one the worker sent itself, and is bound to that message (ADR 0020).
    ``finishing``: the write may use the time up to the finishing deadline (a final receive's
    second try, which no redelivery could make for it).

    Called through :meth:`LedgerView.store` (by :meth:`.OutcomeBook.record`). Nothing is ever
    published that the ledger does not hold: a dead-lettered outcome the ledger cannot take
    returns None (not announced; the message is on its way to the DLQ, where the provisional
    dead letter of its final receive, if written, stands); any other outcome raises (the
    request fails and comes back).

    Raises:
        LedgerUnavailableError: a completed request's outcome could not be stored.
        LedgerRecordUnreadableError: the request's record cannot be read (never written over).
        RequestIdConflictError: another request bound the id meanwhile (nothing of it returned).
        OutOfTimeError: the write would not fit before the deadline (the record comes back).
    """
    ledger = view.ledger
    if ledger is None:
        return outcome
    dead = bool(outcome.dead_lettered)
    try:
        return _stored(view, ledger, outcome, completing_message_id if dead else None, finishing)
    except _NOT_STORED:
        if dead:
            return None
        raise


_NOT_STORED = (
    OutOfTimeError,
    LedgerUnavailableError,
    LedgerRecordUnreadableError,
    RequestIdConflictError,
)
"""What leaves an outcome unstored: a dead letter then goes unannounced, anything else fails."""


def _stored(
    view: LedgerView,
    ledger: RequestLedger,
    outcome: AllocationOutcome,
    source: str | None,
    finishing: bool,
) -> AllocationOutcome:
    dead = bool(outcome.dead_lettered)
    if not view.has_time(dead or finishing):
        # Never let a write outlive the function (a timeout would replay the whole batch).
        raise OutOfTimeError()
    if outcome.request_id in view.unreadable:
        # Never written over: an operator inspects and repairs it (its runbook).
        raise LedgerRecordUnreadableError(view.unreadable[outcome.request_id])
    entry = view.entries.get(outcome.request_id)
    outcome = _superseding(entry, outcome)
    held = ledger.store_outcome(outcome, dead_lettered=dead, source_message_id=source)
    view.entries[outcome.request_id] = _terminal_entry(
        outcome.request_id, held, entry, source if held == outcome else None
    )
    return held


def confirm_announced(view: LedgerView, published: Iterable[AllocationOutcome]) -> None:
    """Flag published outcomes as announced, so the DLQ audit does not announce them again.

    Called for the records of final receives only (the only messages that can reach the DLQ
    with a terminal record), and only for an outcome equal to the record the batch holds (a
    refused ``requestIdConflict`` outcome is not its id's record). Best kept: without the flag
    the audit announces the stored outcome once more (outcome events are at least once), so
    a failure is not raised.
    """
    if view.ledger is None:
        return
    for outcome in published:
        entry = view.entries.get(outcome.request_id)
        if entry is None or not entry.is_terminal or entry.outcome != outcome:
            continue
        if not view.has_time(True):
            return
        try:
            view.ledger.mark_announced([outcome.request_id])
        except LedgerUnavailableError:
            return


def _superseding(entry: LedgerEntry | None, outcome: AllocationOutcome) -> AllocationOutcome:
    """A redrive's outcome, marked as replacing the dead letter the ledger had announced."""
    if entry is not None and entry.was_announced_dead and not outcome.dead_lettered:
        return outcome.model_copy(update={"supersedes": "deadLettered"})
    return outcome


def _terminal_entry(
    request_id: str,
    held: AllocationOutcome,
    earlier: LedgerEntry | None,
    source_message_id: str | None = None,
) -> LedgerEntry:
    """The batch's copy of the record just stored; a release keeps its recorded intent."""
    return LedgerEntry(
        request_id=request_id,
        state="deadLettered" if held.dead_lettered else "final",
        workspace_id=held.workspace_id,
        kind=held.kind,
        outcome=held,
        intent=earlier.intent if earlier is not None else None,
        source_message_id=source_message_id,
    )


def replay_invalid(
    view: LedgerView, outcome: AllocationOutcome | None, message_id: str
) -> AllocationOutcome | None:
    """The stored ``invalid`` outcome a redelivery of the same invalid message replays, or None.

    Only the dead letter this very message sent (ADR 0020): any other record under the id is
    handled as before (the message is dead-lettered and its outcome stored).
    """
    entry = None if outcome is None else view.entries.get(outcome.request_id)
    if entry is None or outcome is None or not entry.was_dead_lettered_by(message_id):
        return None
    return entry.outcome if entry.belongs_to(outcome.workspace_id, outcome.kind) else None


def mark_final_receive(
    view: LedgerView, request: Request, receive_count: int, sequence_number: str | None = None
) -> None:
    """Leave a provisional dead letter before a final receive applies anything.

    It carries the message's ``sequence_number`` (ADR 0018's order key): the DLQ audit may
    confirm and announce it, and the DLQ copy's own number is not the source queue's.

    It stands only if this receive never completes (the function crashes or times out): SQS
    then moves the message to the DLQ and readers see a dead-lettered outcome. When the
    receive completes, its own terminal outcome replaces it.

    Raises:
        LedgerUnavailableError: the ledger could not be written (the request comes back).
        OutOfTimeError: the write would not fit before the applying deadline (the request
            comes back).
    """
    if view.ledger is None:
        return
    if not view.has_time(False):
        raise OutOfTimeError()
    outcome = build_outcome(
        request, "failed", receive_count, error_code=FINAL_RECEIVE_UNFINISHED
    ).model_copy(update={"dead_lettered": True, "sequence_number": sequence_number})
    view.ledger.store_outcome(outcome, provisional=True)


def mark_final_receives_ahead(
    view: LedgerView, final_receives: Iterable[tuple[str, Request, int]]
) -> None:
    """Leave the provisional dead letters of the batch's final receives as the batch starts.

    ``final_receives``: (message id, request, receive count) of each valid first copy on its
    final receive. Written at the start, not at each record's turn, so a function that dies
    before a record's turn (a crash, a timeout behind slow records) still leaves that request
    a terminal record with its order key for the DLQ audit. Best effort: a request whose
    record is answered, or whose write fails here, is left to its turn, which writes it or
    fails the record with the reason (as without this pass).
    """
    if view.ledger is None or view.error is not None:
        return
    pending = [item for item in final_receives if _awaits_apply(view, *item[:2])]
    answered = view.answered(request for _, request, _ in pending)
    for message_id, request, receive_count in pending:
        if request.request_id in answered or request.request_id in view.marked:
            continue
        sequence_number = view.sequence_numbers.get(message_id)
        try:
            mark_final_receive(view, request, receive_count, sequence_number)
        except Exception:  # noqa: S112 - its own turn writes it or fails with the reason
            continue
        view.marked.add(request.request_id)


def _awaits_apply(view: LedgerView, message_id: str, request: Request) -> bool:
    """True unless the record read answers this message without applying it (a replay)."""
    entry = view.entries.get(request.request_id)
    return entry is None or not entry.is_replayed_for(message_id)


def record_transfer_intent(
    view: LedgerView, request: EnsureRequest | ReleaseRequest, before: Totals, target: Totals
) -> None:
    """Record the transfer an ensure or a release is about to send (a no-op without a ledger).

    Raises:
        LedgerConflictError: the request has a terminal record already.
        RequestIdConflictError: another request bound the id meanwhile.
        LedgerUnavailableError: the ledger could not be written (nothing was transferred).
        OutOfTimeError: the write would not fit before the deadline (nothing was transferred).
    """
    if view.ledger is None:
        return
    if not view.has_time(False):
        raise OutOfTimeError()
    request_id = request.request_id
    intent = TransferIntent(before=before, target=target)
    view.ledger.record_intent(
        request_id, intent, workspace_id=request.workspace_id, kind=request.kind
    )
    entry = view.entries.get(request_id)
    if entry is None or not entry.is_terminal:
        view.entries[request_id] = LedgerEntry(
            request_id=request_id,
            state="intent",
            workspace_id=request.workspace_id,
            kind=request.kind,
            intent=intent,
        )
