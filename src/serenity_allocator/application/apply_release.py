"""Apply a release: hand the child's surplus back under the settle policy.

With a request ledger, the release's intent (totals before, target) is recorded just before its
transfer. A redelivered release that finds an intent and a child already at the target reports
``released`` with the recorded before and after instead of re-planning from the lowered child.
"""

from __future__ import annotations

from ..domain.messages import AllocationOutcome, ReleaseRequest
from ..domain.outcomes import build_outcome
from ..domain.ports import WorkspaceGateway
from ..domain.release import ReleasePlan, release_surplus
from ..domain.transfer import TransferContext
from .invocation import WorkerConfig
from .outcomes import ReleaseIncompleteError
from .request_ledger import LedgerView, record_transfer_intent, replay_release


def apply_release(
    request: ReleaseRequest,
    receive_count: int,
    *,
    config: WorkerConfig,
    gateway: WorkspaceGateway,
    ledger: LedgerView,
    context: TransferContext,
) -> AllocationOutcome:
    """The terminal outcome of one release (``context`` carries the deadline and observer).

    Raises:
        ReleaseIncompleteError: An expected, transient failure (busy, settle timeout, 429...);
            the queue brings the release back.
        LedgerUnavailableError, LedgerConflictError: the intent could not be recorded; nothing
            was transferred and the release comes back.
    """
    replayed = _replayed(request, receive_count, gateway, ledger)
    if replayed is not None:
        return replayed

    def record_intent(plan: ReleasePlan) -> None:
        record_transfer_intent(ledger, request, plan.before, plan.target)

    result = release_surplus(
        gateway,
        request.workspace_id,
        context,
        floor=request.floor or config.blocks.as_totals(),
        blocks=config.blocks,
        policy=config.release_policy,
        before_transfer=record_intent,
    )
    plan = result.plan
    if result.outcome == "error":
        raise ReleaseIncompleteError(result.error_code or "error")
    if result.outcome == "dry-run":  # the worker never previews; kept total for mypy
        raise AssertionError("release worker must not run dry")
    before = plan.before if plan else None
    after = plan.target if plan and result.outcome == "released" else before
    return build_outcome(request, result.outcome, receive_count, before=before, after=after)


def _replayed(
    request: ReleaseRequest, receive_count: int, gateway: WorkspaceGateway, ledger: LedgerView
) -> AllocationOutcome | None:
    # Only a release with a recorded intent pays this extra read (a redelivery after its
    # transfer may have landed); the first delivery reads once, inside release_surplus.
    if ledger.intent(request.request_id) is None:
        return None
    current = gateway.read_resources(request.workspace_id).totals()
    template = build_outcome(request, "released", receive_count)
    # Not counted again in ReleaseOutcome: the delivery that transferred counted it.
    return replay_release(ledger, request, current, template)
