"""What a service reads to learn how its request ended, without an EventBridge rule.

The worker writes every request's terminal outcome to the request ledger (DynamoDB) before it
publishes the outcome event, so a strongly consistent read of the ledger is at least as fresh
as the event. ``get_outcome`` answers at once; ``wait_for_outcome`` polls with capped
exponential backoff until the outcome is there or the caller's timeout runs out
(docs/decisions/0003-async-worker-contract.md, "Waiting for an outcome").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..domain.ledger import PROVISIONAL_GRACE_S, LedgerEntry, RequestIdConflictError, RequestKind
from ..domain.messages import AllocationOutcome
from ..domain.ports import Clock, Sleeper
from .dynamodb_request_ledger import DynamoDbRequestLedger

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["PROVISIONAL_GRACE_S", "OutcomeReader", "OutcomeWaitTimeoutError"]


class OutcomeWaitTimeoutError(TimeoutError):
    """No terminal outcome was recorded for the request within the caller's timeout."""

    def __init__(self, request_id: str, timeout_s: float) -> None:
        super().__init__(f"no outcome for request {request_id} within {timeout_s:g} s")
        self.request_id = request_id
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class PollDelays:
    """How :meth:`OutcomeReader.wait_for_outcome` spaces its polls.

    The first delay, doubled up to the longest.
    """

    first_s: float = 0.2
    max_s: float = 2.0


POLL_DELAYS = PollDelays()
"""0.2 s, doubling up to 2 s."""


class OutcomeReader:
    """Reads request outcomes from the ledger table (strongly consistent reads).

    Args:
        table_name: The ledger table (stack output ``RequestLedgerTableName``).
        dynamodb: An optional ready DynamoDB client (else built on first use with bounded
            timeouts, honouring ``AWS_ENDPOINT_URL``).
        clock: Monotonic seconds, for the wait's deadline (injected in tests).
        sleep: Sleeps between polls (injected in tests).
        wall_clock: Epoch seconds, to age provisional records (injected in tests).
    """

    def __init__(
        self,
        table_name: str,
        dynamodb: DynamoDBClient | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleeper = time.sleep,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = DynamoDbRequestLedger(table_name, dynamodb)
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock

    def get_outcome(
        self,
        request_id: str,
        *,
        workspace_id: str | None = None,
        kind: RequestKind | None = None,
    ) -> AllocationOutcome | None:
        """The request's terminal outcome, or None while it is pending (or unknown).

        A ``dead_lettered`` outcome is terminal until an operator redrives the message; the
        redrive's outcome then replaces it (its ``supersedes`` says so). Give the request's
        ``workspace_id`` and ``kind``: a record the id is bound to for another child or kind is
        another request's (a reused id), and its outcome is never this request's. The worker
        refuses such a request ``rejected / requestIdConflict`` without storing it, so that is
        the answer here too, with nothing of the other request in it.

        Raises:
            LedgerUnavailableError: the ledger could not be read.
            LedgerRecordUnreadableError: the record does not parse.
        """
        entry = self._ledger.get(request_id)
        if entry is None:
            return None
        if _bound_elsewhere(entry, workspace_id, kind):
            return AllocationOutcome(
                request_id=request_id,
                kind=kind or "unknown",
                workspace_id=workspace_id or "",
                status="rejected",
                error_code=RequestIdConflictError.code,
            )
        if not self._is_final(entry):
            return None
        return entry.outcome

    def wait_for_outcome(
        self,
        request_id: str,
        timeout_s: float,
        *,
        delays: PollDelays = POLL_DELAYS,
        workspace_id: str | None = None,
        kind: RequestKind | None = None,
    ) -> AllocationOutcome:
        """Poll until the request has a terminal outcome; never sleeps past ``timeout_s``.

        Delays double from ``delays.first_s`` up to ``delays.max_s``. The last poll happens at
        the deadline, so an outcome written just before it is still seen. ``workspace_id`` and
        ``kind``: as :meth:`get_outcome` (a reused id answers ``requestIdConflict`` at once).

        Raises:
            OutcomeWaitTimeoutError: no terminal outcome within ``timeout_s``.
            LedgerUnavailableError: the ledger could not be read.
        """
        if timeout_s < 0:
            raise ValueError("timeout_s must not be negative")
        deadline = self._clock() + timeout_s
        delay = delays.first_s
        while True:
            outcome = self.get_outcome(request_id, workspace_id=workspace_id, kind=kind)
            if outcome is not None:
                return outcome
            left = deadline - self._clock()
            if left <= 0:
                raise OutcomeWaitTimeoutError(request_id, timeout_s)
            self._sleep(min(delay, left))
            delay = min(delay * 2, delays.max_s)

    def _is_final(self, entry: LedgerEntry) -> bool:
        if not entry.is_terminal or entry.outcome is None:
            return False
        if not entry.provisional:
            return True
        if entry.may_have_transferred:
            # No proof of failure: the transfer may have landed (a redrive's receive tells).
            return False
        # A provisional dead letter stands only once its final receive can no longer finish.
        written = entry.updated_at or 0
        return self._wall_clock() - written >= PROVISIONAL_GRACE_S


def _bound_elsewhere(entry: LedgerEntry, workspace_id: str | None, kind: str | None) -> bool:
    """True when the record binds the id to another child or kind than the asked request's."""
    workspace = entry.bound_workspace
    bound_kind = entry.bound_kind
    other_child = workspace_id is not None and workspace not in (None, workspace_id)
    other_kind = kind is not None and bound_kind not in (None, kind)
    return other_child or other_kind
