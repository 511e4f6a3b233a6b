"""Terminal outcomes: the one place an invocation records them.

Outcomes are built by the domain (:func:`serenity_allocator.domain.messages.build_outcome`).

``OutcomeBook.record`` is the only way an outcome enters the batch's results: a request that
completes, one that runs out of receives, one skipped behind its group on its final receive.
That single entry point is where a request ledger stores the outcome once (see the package
docstring).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...domain.messages import AllocationOutcome
from .request_ledger import LedgerView


class ReleaseIncompleteError(Exception):
    """A release met an expected, transient failure; the queue should bring it back."""

    def __init__(self, code: str) -> None:
        super().__init__(f"release incomplete: {code}")
        self.code = code


@dataclass
class OutcomeBook:
    """The invocation's terminal outcomes, in the order they were reached."""

    entries: list[tuple[str, AllocationOutcome]] = field(default_factory=list)
    ledger: LedgerView | None = None
    """Where a terminal outcome is stored once, before it is announced."""
    sequence_numbers: Mapping[str, str] = field(default_factory=dict)
    """Message id -> its SQS SequenceNumber: the order key every recorded outcome carries."""

    def record(
        self,
        message_id: str,
        outcome: AllocationOutcome,
        *,
        replayed: bool = False,
        completes: bool = False,
        finishing: bool = False,
    ) -> AllocationOutcome | None:
        """Record the terminal outcome of the request carried by ``message_id``.

        The ledger stores it first (a replayed outcome is already stored), so what is
        published is always what the ledger holds; the recorded outcome is returned, or None
        for a dead letter the ledger could not take (it is then not announced).

        ``completes``: the record completes with this outcome (SQS deletes the message), so a
        dead letter is one the worker sent itself; the ledger binds it to ``message_id``, and a
        redelivery of that message after a crash replays it (ADR 0020). A record that fails
        (SQS's redrive then moves it) is not bound. ``finishing``: the store may use the time
        up to the finishing deadline (a final receive's second try).

        Raises:
            LedgerUnavailableError: a completed request's outcome could not be stored (the
                record fails and comes back; nothing is published for it).
        """
        sequence_number = self.sequence_numbers.get(message_id)
        if not replayed and outcome.sequence_number is None and sequence_number is not None:
            outcome = outcome.model_copy(update={"sequence_number": sequence_number})
        if self.ledger is not None and not replayed:
            held = self.ledger.store(
                outcome, message_id if completes else None, finishing=finishing
            )
            if held is None:
                return None
            outcome = held
        self.entries.append((message_id, outcome))
        return outcome

    def __len__(self) -> int:
        return len(self.entries)
