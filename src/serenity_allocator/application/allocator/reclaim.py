"""Park an ensure the pool cannot cover: enqueue releases on its richest siblings, retry later.

A bounded number of times per request (its receive count against the configured maximum), so
a pool nobody can refill rejects the ensure instead of cycling it through the queue. Whether
the ensure was parked is the returned value; the record is failed (so SQS brings it back) in
one place, :func:`.handle_message`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...domain.errors import OutOfTimeError
from ...domain.messages import EnsureRequest, ReleaseRequest
from ...domain.observations import ParkedForReclaim, Reclaim
from ...domain.release import ReclaimRules, choose_reclaim_siblings
from .invocation import EnsureBatch


@dataclass(frozen=True)
class Parked:
    """The ensure waits for the releases enqueued on ``siblings``; it comes back later."""

    siblings: tuple[str, ...]


def park_for_reclaim(
    request: EnsureRequest, receive_count: int, batch: EnsureBatch
) -> Parked | None:
    """Enqueue sibling releases when reclaim can help; None when it cannot (reject the ensure).

    Reclaim cannot help when it is off, the request was parked often enough, or no sibling
    has surplus.

    Raises:
        OutOfTimeError: Enqueueing would not fit before the deadline; the ensure comes back.
    """
    config, observer, enqueuer = batch.config, batch.observer, batch.ports.enqueuer
    if not config.sibling_reclaim or enqueuer is None:
        return None
    if receive_count > config.sibling_reclaim_max_parks:
        observer.record(Reclaim("exhausted"))
        return None
    candidates = choose_reclaim_siblings(
        batch.ports.gateway,
        request.parent_workspace_id,
        request.workspace_id,
        ReclaimRules(
            floor=config.blocks.as_totals(),
            blocks=config.blocks,
            max_siblings=config.sibling_reclaim_max_siblings,
        ),
    )
    if not candidates:
        observer.record(Reclaim("exhausted"))
        return None
    if not batch.deadlines.fits_aws_call():
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
    observer.record(Reclaim("enqueued", len(candidates)))
    observer.record(Reclaim("parked"))
    parked = Parked(tuple(c.workspace_id for c in candidates))
    observer.record(ParkedForReclaim(parked.siblings))
    return parked


def reclaim_request_id(request_id: str, receive_count: int, sibling_id: str) -> str:
    """Deterministic per park (a redelivered park is deduplicated) and short whatever the ids."""
    digest = hashlib.sha256(f"{request_id}|{receive_count}|{sibling_id}".encode()).hexdigest()
    return f"reclaim-{digest[:32]}"
