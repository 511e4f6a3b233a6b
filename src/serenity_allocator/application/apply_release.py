"""Apply a release: hand the child's surplus back under the settle policy."""

from __future__ import annotations

from ..domain.allocation import release_surplus
from ..domain.messages import AllocationOutcome, ReleaseRequest
from .invocation import Invocation
from .outcomes import ReleaseIncompleteError, build_outcome


def apply_release(
    inv: Invocation, request: ReleaseRequest, receive_count: int
) -> AllocationOutcome:
    """The terminal outcome of one release.

    Raises:
        ReleaseIncompleteError: An expected, transient failure (busy, settle timeout, 429...);
            the queue brings the release back.
    """
    config = inv.config
    result = release_surplus(
        inv.ports.gateway,
        request.workspace_id,
        inv.transfer_context(inv.observer),
        floor=request.floor or config.blocks.as_totals(),
        blocks=config.blocks,
        policy=config.release_policy,
    )
    plan = result.plan
    if result.outcome == "error":
        raise ReleaseIncompleteError(result.error_code or "error")
    if result.outcome == "dry-run":  # the worker never previews; kept total for mypy
        raise AssertionError("release worker must not run dry")
    before = plan.before if plan else None
    after = plan.target if plan and result.outcome == "released" else before
    return build_outcome(request, result.outcome, receive_count, before=before, after=after)
