"""The request ledger: one record per request id, so a replay never applies a request twice.

Why a ledger at all: SQS redelivers a message whose invocation did not finish (a function
timeout after publishing, a crash, a failed publish), and the upstream transfer is an absolute
set, so "apply again" is not always "no change" (a release re-reads the lowered child and would
say nothing was released). The ledger holds, per request id:

- ``intent``: a release's planned transfer (totals before, target), written BEFORE it transfers,
  so a replay after a partial application reports ``released`` with the true before and after;
- ``final``: the terminal outcome, written once; a replay publishes it again unchanged;
- ``deadLettered``: the terminal outcome of a valid request that ends in the DLQ. A later
  redrive that completes supersedes it explicitly (the outcome says ``supersedes``). One the
  worker sent to the DLQ itself, completing its record, is bound to that message's id: the same
  message again is SQS redelivering it after a crash, replayed (docs/decisions/0020).

Every record binds its ``request_id`` to the request's workspace and kind, so a second request
reusing an id is refused (``requestIdConflict``) instead of answered with another child's
outcome; and carries a ``schema_version``: a reader ignores fields it does not know and refuses
(``ledgerRecordUnreadable``) only a record it cannot interpret, that record's request alone.

"Exactly once" here means: exactly one terminal ledger record per request, and the request is
applied upstream at most once per terminal record. Outcome EVENTS stay at least once (a replay
publishes them again), always with the content of the ledger record (docs/decisions/0009).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .messages import AllocationOutcome
from .model import Totals
from .ports import Clock, Sleeper

LedgerState = Literal["intent", "final", "deadLettered"]
RequestKind = Literal["ensure", "release"]
BoundKind = Literal["ensure", "release", "unknown"]
"""The kind a record binds its id to: its request's, or ``unknown`` for the ``invalid`` outcome
of a refused body whose request id could be read but whose kind could not (no request of either
kind may then reuse the id)."""

LEDGER_SCHEMA_VERSION = 2
"""The record shape this version writes. 1 (no ``schema_version`` attribute): before the
binding and the announcement flag. Versions only ever add fields, so a reader reads any version
and ignores what it does not know; it refuses only a record whose known fields it cannot read."""


class TransferIntent(BaseModel):
    """The transfer a top-up or a release is about to send: the totals before and the target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    before: Totals
    target: Totals

    @property
    def moves(self) -> bool:
        """True when the transfer changes the child at all (only then can it have landed)."""
        return self.target != self.before

    def landed(self, current: Totals) -> bool:
        """True when the child, now at ``current``, shows this transfer applied.

        The child holding exactly the recorded target means the transfer landed (FIFO order per
        child: no other mutation of this child runs in between), so the true result is the
        recorded before and target, not a re-plan from the changed child.
        """
        return self.moves and current == self.target


PROVISIONAL_GRACE_S = 180
"""How long a record a receive is still writing counts as live: three times the Allocator's
60 s timeout. A final receive that is alive replaces its provisional dead letter within one
timeout, and a receive between its intent and its outcome ends within one too."""


class LedgerEntry(BaseModel):
    """What the ledger holds for one request id.

    Built only from a record whose known fields agree with each other: an outcome stored for
    another request, workspace or kind than the record's own binding does not validate (a
    tampered or corrupted record is unreadable, never replayed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    state: LedgerState
    workspace_id: str | None = None
    """The workspace the request id is bound to; None only on a version-1 intent."""
    kind: BoundKind | None = None
    """The request kind the id is bound to; None only on a version-1 intent."""
    outcome: AllocationOutcome | None = None
    """The terminal outcome (``final`` and ``deadLettered``); None for a bare intent."""
    intent: TransferIntent | None = None
    """A release's recorded intent; kept when the record later turns terminal."""
    provisional: bool = False
    """A ``deadLettered`` record written as a final receive began and never published: it
    stands only if that receive never finished (a crash), and its own receive replaces it."""
    updated_at: int | None = None
    """Epoch seconds of the last write (tells a reader how old a provisional record is)."""
    announced: bool = False
    """True once a publish of the terminal outcome was confirmed by the DLQ audit: the audit
    announces a terminal record of a DLQ message only while this is False."""
    source_message_id: str | None = None
    """The SQS message id of the delivery that sent this dead letter to the DLQ itself and
    completed its record; None on every other record (and on items written before it)."""
    schema_version: int = Field(default=LEDGER_SCHEMA_VERSION, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> LedgerEntry:
        if self.is_terminal and self.outcome is None:
            raise ValueError("outcome: a terminal record without an outcome")
        if self.state == "intent" and self.intent is None:
            raise ValueError("intent: an intent record without an intent")
        if self.outcome is not None:
            _check_outcome_binding(self, self.outcome)
        return self

    @property
    def bound_workspace(self) -> str | None:
        """The workspace this id belongs to (a version-1 record: its outcome's)."""
        if self.workspace_id is not None:
            return self.workspace_id
        return self.outcome.workspace_id if self.outcome is not None else None

    @property
    def bound_kind(self) -> str | None:
        """The request kind this id belongs to (a version-1 record: its outcome's)."""
        if self.kind is not None:
            return self.kind
        return self.outcome.kind if self.outcome is not None else None

    def belongs_to(self, workspace_id: str, kind: str) -> bool:
        """True unless the record binds its id to another workspace or kind.

        A version-1 intent names neither (it was written before the binding): it is taken as
        the request's, as that version did.
        """
        workspace, bound_kind = self.bound_workspace, self.bound_kind
        return (workspace is None or workspace == workspace_id) and (
            bound_kind is None or bound_kind == kind
        )

    @property
    def may_have_transferred(self) -> bool:
        """True for a provisional dead letter beside an intent that moves the child.

        Its final receive recorded the transfer it was about to make and never stored how it
        ended (a crash, or a terminal store that failed): the transfer may have landed, so the
        record is no proof of failure. Only a read of the child (:meth:`TransferIntent.landed`,
        which a redrive's receive makes) tells.
        """
        return self.provisional and self.intent is not None and self.intent.moves

    def is_live(self, now_s: float) -> bool:
        """True while a receive may still be writing this record (within the grace)."""
        open_record = self.state == "intent" or self.provisional
        return open_record and now_s - (self.updated_at or 0) < PROVISIONAL_GRACE_S

    @property
    def is_terminal(self) -> bool:
        """True when a terminal outcome is stored (``final`` or ``deadLettered``)."""
        return self.state != "intent"

    @property
    def is_replayable(self) -> bool:
        """True when every delivery of this request must replay the stored outcome, not apply.

        A ``deadLettered`` record is not replayed by any message but the one that sent it
        (:meth:`is_replayed_for`): another message is an operator's redrive, applied, and its
        outcome supersedes the dead letter.
        """
        return self.state == "final"

    def is_replayed_for(self, message_id: str | None) -> bool:
        """True when the delivery of ``message_id`` must replay the stored outcome, not apply.

        A ``final`` record, for any message; a dead letter, only for the message that sent it
        (:meth:`was_dead_lettered_by`).
        """
        return self.is_replayable or self.was_dead_lettered_by(message_id)

    def was_dead_lettered_by(self, message_id: str | None) -> bool:
        """True when this record is the dead letter the delivery of ``message_id`` sent itself.

        That delivery completed its record: the same message id again means the consumer died
        before the delete (a redrive is a new message). SQS's own dead letters (a final
        receive's, a provisional one) are never bound: only a redrive brings them back.
        """
        return (
            self.state == "deadLettered"
            and not self.provisional
            and message_id is not None
            and self.source_message_id == message_id
        )

    @property
    def was_announced_dead(self) -> bool:
        """True when an earlier life of the message ended in the DLQ: its redrive supersedes it.

        Read before the current receive writes anything, so a provisional record here is one
        whose final receive crashed (readers have seen it as dead-lettered).
        """
        return self.state == "deadLettered"


def _check_outcome_binding(entry: LedgerEntry, outcome: AllocationOutcome) -> None:
    # A stored outcome of another request, workspace or kind: tampered or corrupted.
    if outcome.request_id != entry.request_id:
        raise ValueError("outcome.request_id: not the record's request id")
    if entry.workspace_id is not None and outcome.workspace_id != entry.workspace_id:
        raise ValueError("outcome.workspace_id: not the record's workspace")
    if entry.kind is not None and outcome.kind != entry.kind:
        raise ValueError("outcome.kind: not the record's kind")


class LedgerConflictError(Exception):
    """The ledger refused a write that assumed no terminal record (another delivery won)."""

    code = "ledgerConflict"


class LedgerUnavailableError(Exception):
    """The ledger could not be read or written; the record should be retried."""

    code = "ledgerUnavailable"


class LedgerRecordUnreadableError(Exception):
    """The request's ledger record does not parse: nothing is applied or written over it.

    The message carries the request id and which field is at fault, never the record's values.
    """

    code = "ledgerRecordUnreadable"


class RequestIdConflictError(Exception):
    """The request id is bound to another workspace or kind: this request is refused.

    The message names only this request's id; nothing of the other request.
    """

    code = "requestIdConflict"


@dataclass(frozen=True)
class CallDeadline:
    """When the caller needs an answer by, on its own clock (retries and waits fit inside).

    Args:
        clock: The caller's monotonic seconds.
        sleep: Sleeps between retries (injected so tests never wait).
        at: Monotonic time by which the call, its waits and retries included, is over.
        attempt_s: The longest one attempt may take (its client's worst case).
    """

    clock: Clock
    sleep: Sleeper
    at: float
    attempt_s: float

    def fits(self, wait_s: float = 0.0) -> bool:
        """True when waiting ``wait_s`` and then one more attempt still end by :attr:`at`."""
        return self.clock() + wait_s + self.attempt_s <= self.at


@dataclass
class LedgerRead:
    """What one batch lookup returned: readable records, unreadable ones, unanswered ids."""

    entries: dict[str, LedgerEntry] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Request id -> why its record cannot be read (field names, never values)."""
    unanswered: set[str] = field(default_factory=set)
    """Ids DynamoDB left unprocessed (throttling) until the deadline: unknown, not absent."""


class RequestLedger(Protocol):
    """Where the worker records what it did per request id (consistent reads, conditional writes).

    Implemented by ``adapters.dynamodb_request_ledger.DynamoDbRequestLedger``.
    """

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        """Read the records of ``request_ids`` (strongly consistent); absent ids are left out.

        Ids the store leaves unprocessed are retried with jittered backoff while ``deadline``
        allows, then reported as unanswered; a record that does not parse is reported as
        unreadable. Neither affects the other ids.

        Raises:
            LedgerUnavailableError: the ledger could not be read at all.
        """
        ...

    def record_intent(
        self,
        request_id: str,
        intent: TransferIntent,
        *,
        workspace_id: str,
        kind: RequestKind = "release",
    ) -> None:
        """Record the transfer an ensure or a release is about to send, bound to child and kind.

        It replaces an earlier intent; beside a ``deadLettered`` record (the provisional one of
        the final receive now applying, or a redriven message's) it is added and the dead
        letter stays terminal until this delivery stores its outcome.

        Raises:
            LedgerConflictError: a ``final`` record exists (another delivery completed it).
            RequestIdConflictError: the id is bound to another workspace or kind.
            LedgerRecordUnreadableError: the record there cannot be read.
            LedgerUnavailableError: the ledger could not be written.
        """
        ...

    def store_outcome(
        self,
        outcome: AllocationOutcome,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> AllocationOutcome:
        """Store a terminal outcome once; return the outcome the ledger holds afterwards.

        A ``final`` record is never overwritten: when one exists, it is returned and ``outcome``
        is dropped (the caller publishes what is returned). A ``deadLettered`` record is
        replaced by any later terminal outcome (a redrive), a provisional one is never written
        over an existing terminal record. ``source_message_id`` is kept only with a published
        dead letter (:attr:`LedgerEntry.source_message_id`); any other write clears it.

        Raises:
            RequestIdConflictError: the id is bound to another workspace or kind (nothing of
                that request is returned).
            LedgerRecordUnreadableError: the record there cannot be read.
            LedgerUnavailableError: the ledger could not be written.
        """
        ...

    def mark_announced(self, request_ids: Sequence[str]) -> None:
        """Note that the terminal outcomes of ``request_ids`` were published (best kept).

        Raises:
            LedgerUnavailableError: the ledger could not be written.
        """
        ...


def read_stored(model: type[BaseModel], text: str, where: str) -> Any:
    """A model stored as JSON by any schema version: unknown fields are ignored.

    Raises:
        LedgerRecordUnreadableError: the text is not a JSON object, or a known field is not
            what this version can read (named; values are never quoted).
    """
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise LedgerRecordUnreadableError(f"{where}: not valid JSON") from None
    if not isinstance(document, dict):
        raise LedgerRecordUnreadableError(f"{where}: not a JSON object")
    try:
        return model.model_validate(known_fields(model, document))
    except ValidationError as exc:
        raise LedgerRecordUnreadableError(describe_unreadable(exc, where)) from None


def known_fields(model: type[BaseModel], document: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` without the keys ``model`` does not know (nested models too)."""
    known: dict[str, Any] = {}
    for name, value in document.items():
        info = model.model_fields.get(name)
        if info is None:
            if name == "attempts":  # an outcome's legacy name for receive_count
                known[name] = value
            continue
        nested = _model_of(info.annotation)
        known[name] = (
            known_fields(nested, value) if nested is not None and isinstance(value, dict) else value
        )
    return known


def _model_of(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def describe_unreadable(exc: ValidationError, where: str) -> str:
    """Which fields of ``where`` could not be read (names only: values are never quoted)."""
    fields = sorted({_field_of(error) or where for error in exc.errors()})
    return f"{where}: unreadable field(s) {', '.join(fields)}"


def _field_of(error: Any) -> str:
    # A disagreement between parts is reported on the whole record by the model validator,
    # whose own messages (never a value) start with the field at fault.
    if error["loc"]:
        return ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return message.split(":", 1)[0] if ":" in message else ""
