"""The request ledger: one record per request id, so a replay never applies a request twice.

Why a ledger at all: SQS redelivers a message whose invocation did not finish (a function
timeout after publishing, a crash, a failed publish), and the upstream transfer is an absolute
set, so "apply again" is not always "no change" (a release re-reads the lowered child and would
say nothing was released). The ledger holds, per request id:

- ``intent``: a release's planned transfer (totals before, target), written BEFORE it transfers,
  so a replay after a partial application reports ``released`` with the true before and after;
- ``final``: the terminal outcome, written once; a replay publishes it again unchanged;
- ``deadLettered``: the terminal outcome of a valid request that ends in the DLQ. A later
  redrive that completes supersedes it explicitly (the outcome says ``supersedes``).

"Exactly once" here means: exactly one terminal ledger record per request, and the request is
applied upstream at most once per terminal record. Outcome EVENTS stay at least once (a replay
publishes them again), always with the content of the ledger record (docs/decisions/0009).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from .messages import AllocationOutcome
from .model import Totals

LedgerState = Literal["intent", "final", "deadLettered"]


class ReleaseIntent(BaseModel):
    """The transfer a release is about to send: the child's totals before and the target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    before: Totals
    target: Totals


class LedgerEntry(BaseModel):
    """What the ledger holds for one request id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_id: str
    state: LedgerState
    outcome: AllocationOutcome | None = None
    """The terminal outcome (``final`` and ``deadLettered``); None for a bare intent."""
    intent: ReleaseIntent | None = None
    """A release's recorded intent; kept when the record later turns terminal."""
    provisional: bool = False
    """A ``deadLettered`` record written as a final receive began and never published: it
    stands only if that receive never finished (a crash), and its own receive replaces it."""
    updated_at: int | None = None
    """Epoch seconds of the last write (tells a reader how old a provisional record is)."""

    @property
    def is_terminal(self) -> bool:
        """True when a terminal outcome is stored (``final`` or ``deadLettered``)."""
        return self.state != "intent"

    @property
    def is_replayable(self) -> bool:
        """True when a delivery of this request must replay the stored outcome, not apply.

        A ``deadLettered`` record is not replayed: the message reaching the worker again means
        an operator redrove it, so it is applied and its outcome supersedes the dead letter.
        """
        return self.state == "final"

    @property
    def was_announced_dead(self) -> bool:
        """True when an earlier life of the message ended in the DLQ: its redrive supersedes it.

        Read before the current receive writes anything, so a provisional record here is one
        whose final receive crashed (readers have seen it as dead-lettered).
        """
        return self.state == "deadLettered"


class LedgerConflictError(Exception):
    """The ledger refused a write that assumed no terminal record (another delivery won)."""

    code = "ledgerConflict"


class LedgerUnavailableError(Exception):
    """The ledger could not be read or written; the record should be retried."""

    code = "ledgerUnavailable"


class RequestLedger(Protocol):
    """Where the worker records what it did per request id (consistent reads, conditional writes).

    Implemented by ``adapters.dynamodb_request_ledger.DynamoDbRequestLedger``.
    """

    def lookup(self, request_ids: Sequence[str]) -> dict[str, LedgerEntry]:
        """Read the entries of ``request_ids`` (strongly consistent); absent ids are left out.

        Raises:
            LedgerUnavailableError: the ledger could not be read.
        """
        ...

    def record_intent(self, request_id: str, intent: ReleaseIntent) -> None:
        """Record a release's intent before it transfers.

        It replaces an earlier intent; beside a ``deadLettered`` record (the provisional one of
        the final receive now applying, or a redriven message's) it is added and the dead
        letter stays terminal until this delivery stores its outcome.

        Raises:
            LedgerConflictError: a ``final`` record exists (another delivery completed it).
            LedgerUnavailableError: the ledger could not be written.
        """
        ...

    def store_outcome(
        self, outcome: AllocationOutcome, *, dead_lettered: bool = False, provisional: bool = False
    ) -> AllocationOutcome:
        """Store a terminal outcome once; return the outcome the ledger holds afterwards.

        A ``final`` record is never overwritten: when one exists, it is returned and ``outcome``
        is dropped (the caller publishes what is returned). A ``deadLettered`` record is
        replaced by any later terminal outcome (a redrive), a provisional one is never written
        over an existing terminal record.

        Raises:
            LedgerUnavailableError: the ledger could not be written.
        """
        ...


def replayed_release_outcome(
    intent: ReleaseIntent, current: Totals, template: AllocationOutcome
) -> AllocationOutcome | None:
    """The ``released`` outcome of an earlier delivery whose transfer landed, or None.

    The child now holding exactly the recorded target means the intent's transfer was applied
    (FIFO order per child: no other mutation of this child runs in between), so the true
    result is the recorded before and target, not a re-plan from the lowered child.
    """
    if current != intent.target or intent.target == intent.before:
        return None
    return template.model_copy(
        update={
            "status": "released",
            "error_code": None,
            "totals_before": intent.before,
            "totals_after": intent.target,
        }
    )
