"""How a request's terminal outcome is built: one shape for every path that ends a request."""

from __future__ import annotations

from .messages import AllocationOutcome, EnsureRequest, OutcomeStatus, ReleaseRequest
from .model import Totals


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
