"""The four answers of :meth:`.request_ledger.LedgerView.decide`, before a request is applied."""

from __future__ import annotations

from dataclasses import dataclass

from ..domain.messages import AllocationOutcome


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
    """Nothing settles the request: apply it."""


LedgerDecision = Refuse | FollowFirst | Replay | Apply
