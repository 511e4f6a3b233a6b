"""Apply a release: hand the child's surplus back under the settle policy.

With a request ledger, the release's intent (totals before, target) is recorded just before its
transfer. A redelivered release whose recorded transfer landed (:meth:`.LedgerView.landed`)
reports ``released`` with the recorded before and after instead of re-planning from the lowered
child. The outcome is built in one place, at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...domain.allocation import (
    ReleaseAsk,
    ReleaseOutcome,
    ReleasePlan,
    ReleaseRules,
    release_surplus,
)
from ...domain.container_memory import InFlightUnits
from ...domain.messages import (
    AllocationOutcome,
    OutcomeStatus,
    ReleaseRequest,
    ServingCall,
    build_outcome,
)
from ...domain.ports import WorkspaceGateway
from ...domain.transfer import TransferContext
from ..credentials.request_credentials import RequestCredentials
from .invocation import WorkerConfig
from .request_ledger import LedgerView, record_transfer_intent

_STATUSES: dict[ReleaseOutcome, OutcomeStatus] = {
    "released": "released",
    "nothing-to-release": "nothing-to-release",
    "requires-decommission": "requires-decommission",
}
"""The outcome status of each result a release the worker ran can end with (not an error)."""


@dataclass(frozen=True)
class ReleaseCall:
    """The upstream a release is applied to, and the deadline and observer its calls run under."""

    gateway: WorkspaceGateway
    context: TransferContext
    credentials: RequestCredentials | None = None
    """IMS mode: the batch's sessions (the release's roll is stored before its transfer)."""
    in_flight: InFlightUnits | None = None
    """The container's units on their way per child: a release gives the child's up."""


class ReleaseIncompleteError(Exception):
    """A release met an expected, transient failure; the queue should bring it back."""

    def __init__(self, code: str) -> None:
        super().__init__(f"release incomplete: {code}")
        self.code = code


def apply_release(
    request: ReleaseRequest,
    receive_count: int,
    *,
    config: WorkerConfig,
    ledger: LedgerView,
    call: ReleaseCall,
) -> AllocationOutcome:
    """The terminal outcome of one release.

    Raises:
        ReleaseIncompleteError: An expected, transient failure (busy, settle timeout, 429...);
            the queue brings the release back.
        LedgerUnavailableError, LedgerConflictError: the intent could not be recorded; nothing
            was transferred and the release comes back.
    """

    def record_intent(plan: ReleasePlan) -> None:
        if call.credentials is not None:
            call.credentials.rolls_stored([request])  # stored beside the read, before applying
        record_transfer_intent(ledger, request, plan.before, plan.target)

    gateway = call.gateway
    status: OutcomeStatus
    landed = ledger.landed(request, gateway)
    if landed is not None:
        # Not counted again in ReleaseOutcome: the delivery that transferred counted it.
        status, before, after = "released", landed.before, landed.target
    else:
        result = release_surplus(
            gateway,
            # floor None: the rule's own floor, one block of each
            ReleaseAsk(request.workspace_id, floor=request.floor),
            call.context,
            ReleaseRules(blocks=config.blocks, policy=config.release_policy),
            before_transfer=record_intent,
        )
        if result.outcome == "error":
            raise ReleaseIncompleteError(result.error_code or "error")
        # A release that lowers nothing keeps its target equal to its before, so the totals
        # after are the plan's target whatever the outcome.
        status = _STATUSES[result.outcome]  # a dry run is never asked for: not in the table
        before, after = result.plan.before, result.plan.target
    if call.in_flight is not None:
        # The service hands back what it does not use: nothing of the child's is on its way.
        call.in_flight.forget(request.workspace_id)
    return build_outcome(request, status, receive_count, served=ServingCall(before, after))
