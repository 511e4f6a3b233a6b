"""How a request's terminal outcome is built: one shape for every path that ends a request."""

from __future__ import annotations

from dataclasses import dataclass

from .messages import AllocationOutcome, EnsureRequest, OutcomeStatus, ReleaseRequest
from .model import Totals


@dataclass(frozen=True)
class ServingCall:
    """The call that served a request: the child's totals before and after it.

    ``covered``: how many requests it served (1: the request's own call; more: a coalesced
    run's one call).
    """

    before: Totals
    after: Totals
    covered: int = 1


def build_outcome(
    request: EnsureRequest | ReleaseRequest,
    status: OutcomeStatus,
    receive_count: int,
    *,
    error_code: str | None = None,
    served: ServingCall | None = None,
) -> AllocationOutcome:
    """The outcome event of ``request``, labelled with the receive it completed on.

    ``served``: the call that served it, if one did (its totals are the outcome's).
    """
    return AllocationOutcome(
        request_id=request.request_id,
        kind=request.kind,
        workspace_id=request.workspace_id,
        status=status,
        error_code=error_code,
        totals_before=served.before if served is not None else None,
        totals_after=served.after if served is not None else None,
        receive_count=receive_count,
        coalesced=served.covered if served is not None else 1,
        source=request.source if isinstance(request, ReleaseRequest) else None,
        run_id=request.run_id if isinstance(request, ReleaseRequest) else None,
        org_id=request.org_id,
        brand_id=request.brand_id,
    )
