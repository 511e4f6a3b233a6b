"""Park an ensure the pool cannot cover: enqueue releases on its richest siblings, retry later.

A bounded number of times per request (its receive count against the configured maximum), so
a pool nobody can refill rejects the ensure instead of cycling it through the queue.
"""

from __future__ import annotations

import hashlib

from ..domain.errors import OutOfTimeError, ParkedForReclaimError
from ..domain.messages import EnsureRequest, ReleaseRequest
from ..domain.reclaim import choose_reclaim_siblings
from ..domain.worker_events import ParkedForReclaim, Reclaim
from .invocation import Invocation


def park_for_reclaim(inv: Invocation, request: EnsureRequest, receive_count: int) -> None:
    """Enqueue sibling releases and fail the ensure for redelivery, when reclaim can help.

    Returns without parking when reclaim is off, the request was parked often enough, or no
    sibling has surplus; the caller then rejects the ensure.

    Raises:
        ParkedForReclaimError: The releases were enqueued; the ensure should come back.
        OutOfTimeError: Enqueueing would not fit before the deadline; the ensure comes back.
    """
    config, enqueuer = inv.config, inv.ports.enqueuer
    if not config.sibling_reclaim or enqueuer is None:
        return
    if receive_count > config.sibling_reclaim_max_parks:
        inv.observer.record(Reclaim("exhausted"))
        return
    candidates = choose_reclaim_siblings(
        inv.ports.gateway,
        request.parent_workspace_id,
        request.workspace_id,
        floor=config.blocks.as_totals(),
        blocks=config.blocks,
        max_siblings=config.sibling_reclaim_max_siblings,
    )
    if not candidates:
        inv.observer.record(Reclaim("exhausted"))
        return
    if not inv.has_time_to_call_aws():
        raise OutOfTimeError()
    enqueuer.enqueue_many(
        [
            ReleaseRequest(
                kind="release",
                request_id=reclaim_request_id(request.request_id, receive_count, c.workspace_id),
                workspace_id=c.workspace_id,
                source="reclaim",
                org_id=request.org_id,
            )
            for c in candidates
        ]
    )
    inv.observer.record(Reclaim("enqueued", len(candidates)))
    inv.observer.record(Reclaim("parked"))
    inv.ports.parked.add(request.request_id)
    inv.observer.record(ParkedForReclaim(tuple(c.workspace_id for c in candidates)))
    raise ParkedForReclaimError()


def reclaim_request_id(request_id: str, receive_count: int, sibling_id: str) -> str:
    """Deterministic per park (a redelivered park is deduplicated) and short whatever the ids."""
    digest = hashlib.sha256(f"{request_id}|{receive_count}|{sibling_id}".encode()).hexdigest()
    return f"reclaim-{digest[:32]}"
