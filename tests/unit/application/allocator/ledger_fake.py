"""An in-memory request ledger with the DynamoDB adapter's conditional rules.

The rules (``adapters/dynamodb_request_ledger.py``), kept equal by
``tests/integration/test_request_ledger_contract.py``, which runs the same scenarios against
this fake and the adapter on moto:

- an intent replaces nothing or an intent; beside a ``deadLettered`` record it is only added
  (the dead letter stays terminal); over a ``final`` record it is refused;
- a terminal outcome replaces nothing, an intent or a dead letter, never a ``final`` record
  (the held one is returned instead);
- a provisional dead letter replaces only nothing or an intent;
- a record keeps its intent when it turns terminal;
- ``source_message_id`` is kept only with a published dead letter; any other store clears it;
- no write touches a record bound to another workspace or kind (``RequestIdConflictError``),
  nor one that cannot be read (``LedgerRecordUnreadableError``);
- ``mark_announced`` flags terminal records only.

``corrupt`` plants an unreadable record (as a tampered or unparseable item reads) and
``throttled`` ids stay unanswered by a batch read, as keys DynamoDB leaves unprocessed past
the caller's deadline.
"""

from __future__ import annotations

from collections.abc import Sequence

from serenity_allocator.domain.ledger import (
    CallDeadline,
    LedgerConflictError,
    LedgerEntry,
    LedgerRead,
    LedgerRecordUnreadableError,
    LedgerState,
    LedgerUnavailableError,
    RequestIdConflictError,
    RequestKind,
    TransferIntent,
)
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals


class InMemoryRequestLedger:
    """The ``RequestLedger`` port in memory; ``down`` makes every call fail as an outage would.

    ``writes`` counts the writes that took effect (refused conditional writes are not counted);
    ``stores`` counts every terminal store asked of it, refused or not; ``lookups`` records the
    ids of each lookup call.
    """

    def __init__(self, *, now: int = 1_800_000_000) -> None:
        self.entries: dict[str, LedgerEntry] = {}
        self.dead_letters: dict[str, AllocationOutcome] = {}
        """The last published (non-provisional) dead letter per request, kept on supersede."""
        self.writes = 0
        self.stores = 0
        self.lookups: list[list[str]] = []
        self.down = False
        self.unreadable: dict[str, str] = {}
        self.throttled: set[str] = set()
        self.announced_calls: list[list[str]] = []
        self._now = now

    def _check_up(self) -> None:
        if self.down:
            raise LedgerUnavailableError("ConnectTimeoutError")

    def corrupt(self, request_id: str, reason: str = "record: unreadable field(s) state") -> None:
        """Make ``request_id``'s record one that does not parse."""
        self.entries.pop(request_id, None)
        self.unreadable[request_id] = reason

    def read_batch(
        self, request_ids: Sequence[str], deadline: CallDeadline | None = None
    ) -> LedgerRead:
        """The stored entries of ``request_ids``; absent ids are left out."""
        self._check_up()
        self.lookups.append(list(request_ids))
        return LedgerRead(
            entries={
                rid: self.entries[rid]
                for rid in request_ids
                if rid in self.entries and rid not in self.throttled
            },
            unreadable={
                rid: self.unreadable[rid]
                for rid in request_ids
                if rid in self.unreadable and rid not in self.throttled
            },
            unanswered={rid for rid in request_ids if rid in self.throttled},
        )

    def lookup(self, request_ids: Sequence[str]) -> dict[str, LedgerEntry]:
        """The readable entries of ``request_ids`` (the adapter's shorthand)."""
        return self.read_batch(request_ids).entries

    def get(self, request_id: str) -> LedgerEntry | None:
        """One stored entry, or None."""
        self._check_up()
        self._check_readable(request_id)
        return self.entries.get(request_id)

    def _check_readable(self, request_id: str) -> None:
        if request_id in self.unreadable:
            raise LedgerRecordUnreadableError(self.unreadable[request_id])

    def _check_bound(self, request_id: str, workspace_id: str, kind: str) -> LedgerEntry | None:
        self._check_readable(request_id)
        entry = self.entries.get(request_id)
        if entry is not None and not entry.belongs_to(workspace_id, kind):
            raise RequestIdConflictError(request_id)
        return entry

    def record_intent(
        self,
        request_id: str,
        intent: TransferIntent,
        *,
        workspace_id: str,
        kind: RequestKind = "release",
    ) -> None:
        """Record an intent under the adapter's conditions."""
        self._check_up()
        entry = self._check_bound(request_id, workspace_id, kind)
        bound = {"workspace_id": workspace_id, "kind": kind, "updated_at": self._now}
        if entry is None or entry.state == "intent":
            replacement = LedgerEntry(request_id=request_id, state="intent", intent=intent, **bound)
        elif entry.state == "deadLettered":
            replacement = entry.model_copy(update={"intent": intent, **bound})
        else:
            raise LedgerConflictError(request_id)
        self.entries[request_id] = replacement
        self.writes += 1

    def mark_announced(self, request_ids: Sequence[str]) -> None:
        """Flag the terminal records among ``request_ids`` as announced."""
        self._check_up()
        self.announced_calls.append(list(request_ids))
        for rid in request_ids:
            entry = self.entries.get(rid)
            if entry is not None and entry.is_terminal:
                self.entries[rid] = entry.model_copy(update={"announced": True})

    def store_outcome(
        self,
        outcome: AllocationOutcome,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> AllocationOutcome:
        """Store a terminal outcome under the adapter's conditions; return what is held."""
        self.stores += 1
        self._check_up()
        entry = self._check_bound(outcome.request_id, outcome.workspace_id, outcome.kind)
        allowed = ("intent",) if provisional else ("intent", "deadLettered")
        if entry is not None and entry.state not in allowed:
            if entry.outcome is None:
                raise LedgerUnavailableError("ledger record vanished")
            return entry.outcome
        state: LedgerState = "deadLettered" if dead_lettered or provisional else "final"
        # The adapter stores the outcome as JSON without None fields and reads it back.
        stored = AllocationOutcome.model_validate_json(outcome.model_dump_json(exclude_none=True))
        self.entries[outcome.request_id] = LedgerEntry(
            request_id=outcome.request_id,
            state=state,
            workspace_id=outcome.workspace_id,
            kind=outcome.kind,
            outcome=stored,
            intent=entry.intent if entry is not None else None,
            provisional=provisional,
            updated_at=self._now,
            source_message_id=source_message_id
            if state == "deadLettered" and not provisional
            else None,
        )
        if state == "deadLettered" and not provisional:
            self.dead_letters[outcome.request_id] = stored
        self.writes += 1
        return outcome


def intent_entry(
    request_id: str, workspace_id: str, kind: RequestKind, before: Totals, target: Totals
) -> LedgerEntry:
    """A record holding only an intent, as an earlier delivery leaves it before its transfer."""
    return LedgerEntry(
        request_id=request_id,
        state="intent",
        workspace_id=workspace_id,
        kind=kind,
        intent=TransferIntent(before=before, target=target),
    )


class StoreFailsOnce(InMemoryRequestLedger):
    """The in-memory ledger whose next terminal store fails (a provisional one still lands)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing_stores = 1

    def store_outcome(
        self,
        outcome: AllocationOutcome,
        *,
        dead_lettered: bool = False,
        provisional: bool = False,
        source_message_id: str | None = None,
    ) -> AllocationOutcome:
        if not provisional and self.failing_stores > 0:
            self.failing_stores -= 1
            raise LedgerUnavailableError("ProvisionedThroughputExceededException")
        return super().store_outcome(
            outcome,
            dead_lettered=dead_lettered,
            provisional=provisional,
            source_message_id=source_message_id,
        )
