"""Apply a release: hand the child's surplus back under the settle policy.

With a request ledger, the release's intent (totals before, target) is recorded just before its
transfer. A redelivered release that finds an intent and a child already at the target reports
``released`` with the recorded before and after instead of re-planning from the lowered child.
"""

from __future__ import annotations

from ..domain.allocation import ReleasePlan, release_surplus
from ..domain.messages import AllocationOutcome, ReleaseRequest
from .invocation import Invocation
from .outcomes import ReleaseIncompleteError, build_outcome
from .request_ledger import record_release_intent, replay_release


def apply_release(
    inv: Invocation, request: ReleaseRequest, receive_count: int
) -> AllocationOutcome:
    """The terminal outcome of one release.

    Raises:
        ReleaseIncompleteError: An expected, transient failure (busy, settle timeout, 429...);
            the queue brings the release back.
        LedgerUnavailableError, LedgerConflictError: the intent could not be recorded; nothing
            was transferred and the release comes back.
    """
    config = inv.config
    replayed = _replayed(inv, request, receive_count)
    if replayed is not None:
        return replayed

    def record_intent(plan: ReleasePlan) -> None:
        record_release_intent(inv.ledger, request, plan.before, plan.target)

    result = release_surplus(
        inv.ports.gateway,
        request.workspace_id,
        inv.transfer_context(inv.observer),
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
    inv: Invocation, request: ReleaseRequest, receive_count: int
) -> AllocationOutcome | None:
    # Only a release with a recorded intent pays this extra read (a redelivery after its
    # transfer may have landed); the first delivery reads once, inside release_surplus.
    if inv.ledger.intent(request.request_id) is None:
        return None
    current = inv.ports.gateway.read_resources(request.workspace_id).totals()
    template = build_outcome(request, "released", receive_count)
    # Not counted again in ReleaseOutcome: the delivery that transferred counted it.
    return replay_release(inv.ledger, request, current, template)
