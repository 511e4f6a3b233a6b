"""Terminal outcomes: how one is built, and the one place an invocation records them.

``OutcomeBook.record`` is the only way an outcome enters the batch's results: a request that
completes, one that runs out of receives, one skipped behind its group on its final receive.
That single entry point is where a request ledger stores the outcome once (see the package
docstring).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..domain.messages import AllocationOutcome, EnsureRequest, OutcomeStatus, ReleaseRequest
from ..domain.model import Totals

if TYPE_CHECKING:
    from .request_ledger import LedgerView


class ReleaseIncompleteError(Exception):
    """A release met an expected, transient failure; the queue should bring it back."""

    def __init__(self, code: str) -> None:
        super().__init__(f"release incomplete: {code}")
        self.code = code


def build_outcome(
    request: EnsureRequest | ReleaseRequest,
    status: OutcomeStatus,
    receive_count: int,
    *,
    error_code: str | None = None,
    before: Totals | None = None,
    after: Totals | None = None,
    coalesced: int = 1,
) -> AllocationOutcome:
    """The outcome event of ``request``, labelled with the receive it completed on."""
    return AllocationOutcome(
        request_id=request.request_id,
        kind=request.kind,
        workspace_id=request.workspace_id,
        status=status,
        error_code=error_code,
        totals_before=before,
        totals_after=after,
        receive_count=receive_count,
        coalesced=coalesced,
        source=request.source if isinstance(request, ReleaseRequest) else None,
        run_id=request.run_id if isinstance(request, ReleaseRequest) else None,
        org_id=request.org_id,
        brand_id=request.brand_id,
    )


@dataclass
class OutcomeBook:
    """The invocation's terminal outcomes, in the order they were reached."""

    entries: list[tuple[str, AllocationOutcome]] = field(default_factory=list)
    ledger: LedgerView | None = None
    """Where a terminal outcome is stored once, before it is announced."""
    sequence_numbers: Mapping[str, str] = field(default_factory=dict)
    """Message id -> its SQS SequenceNumber: the order key every recorded outcome carries."""

    def record(
        self, message_id: str, outcome: AllocationOutcome, *, replayed: bool = False
    ) -> AllocationOutcome | None:
        """Record the terminal outcome of the request carried by ``message_id``.

        The ledger stores it first (a replayed outcome is already stored), so what is
        published is always what the ledger holds; the recorded outcome is returned, or None
        for a dead letter the ledger could not take (it is then not announced).

        Raises:
            LedgerUnavailableError: a completed request's outcome could not be stored (the
                record fails and comes back; nothing is published for it).
        """
        sequence_number = self.sequence_numbers.get(message_id)
        if not replayed and outcome.sequence_number is None and sequence_number is not None:
            outcome = outcome.model_copy(update={"sequence_number": sequence_number})
        if self.ledger is not None and not replayed:
            held = self.ledger.store(outcome)
            if held is None:
                return None
            outcome = held
        self.entries.append((message_id, outcome))
        return outcome

    def __len__(self) -> int:
        return len(self.entries)
