"""Apply an ensure: alone, or as one combined top-up for a run of consecutive ensures.

A run's leader makes the combined call; the members behind it share its result. When the sum
does not fit (brand limit, pool exhausted) the run splits and each request is applied on its
own, in order. A refusal is a returned ``rejected`` outcome; anything a retry could fix raises.
"""

from __future__ import annotations

from ..domain.allocation import EnsureResult, ensure_headroom
from ..domain.ceiling import Ceiling, combine_ceilings
from ..domain.coalescing import EnsureRun
from ..domain.errors import (
    BrandAiLimitError,
    OrgPoolExhaustedError,
    OutOfTimeError,
    ParkedForReclaimError,
    TieredPromptsError,
)
from ..domain.messages import AllocationOutcome, EnsureRequest, OutcomeStatus
from ..domain.model import Totals
from .attempt_observer import AttemptObserver
from .batch_plan import BatchMessage
from .invocation import Invocation
from .outcomes import build_outcome
from .reclaim import park_for_reclaim


def apply_ensure(
    inv: Invocation, message: BatchMessage, request: EnsureRequest
) -> AllocationOutcome:
    """The terminal outcome of one ensure message; raises when a retry could succeed."""
    receive_count = message.receive_count
    if not inv.config.dynamic_allocation:
        inv.observer.disabled_noop()
        return build_outcome(request, "disabled", receive_count)
    run = _combined_run(inv, message.message_id)
    try:
        if run is not None:
            result = _apply_run(inv, run, message.message_id, receive_count)
        else:
            result = _apply_one(inv, request, receive_count)
    except (BrandAiLimitError, OrgPoolExhaustedError, TieredPromptsError) as exc:
        return build_outcome(request, "rejected", receive_count, error_code=exc.code)
    status: OutcomeStatus = result.outcome
    if result.topped_up and request.request_id in inv.ports.parked:
        inv.observer.reclaim("served")
        status = "topped-up-after-reclaim"
    return build_outcome(
        request,
        status,
        receive_count,
        before=result.before,
        after=result.after,
        # Re-read split: a leader whose combined call was refused was served on its own.
        coalesced=len(run.members) if run is not None and not run.split else 1,
    )


def _combined_run(inv: Invocation, message_id: str) -> EnsureRun | None:
    """The run this message belongs to, when one combined call serves several requests."""
    run = inv.plan.runs.get(message_id)
    if run is None or len(run.members) < 2 or run.split:
        return None
    return run


def _apply_run(
    inv: Invocation, run: EnsureRun, message_id: str, receive_count: int
) -> EnsureResult:
    if message_id != run.leader:
        # The leader's combined call already covered this request (a failed leader fails the
        # rest of its group before we get here: skip_group_on_error).
        return inv.run_results[run.leader]
    observer = inv.attempt_observer()
    leader = run.requests[0]
    try:
        result = _call(inv, leader, run.need, run.ceiling, run.include_drafted, observer)
    except (BrandAiLimitError, OrgPoolExhaustedError, TieredPromptsError):
        # The sum does not fit (a tiered child's tiers may cover each need alone, never the
        # sum); each request may on its own. No request received this refusal.
        observer.discard()
        run.split = True
        return _apply_one(inv, leader, receive_count)
    except Exception:
        # Any other failure is the members' too: keep what it recorded (a busy rejection is
        # real), and if it completes the leader (a terminal upstream answer), let the members
        # behind it make their own call instead of reading a result never stored.
        observer.commit()
        run.split = True
        raise
    observer.commit()
    inv.observer.coalesced(len(run.members) - 1)
    inv.run_results[run.leader] = result
    return result


def _apply_one(inv: Invocation, request: EnsureRequest, receive_count: int) -> EnsureResult:
    observer = inv.attempt_observer()
    try:
        result = _call(
            inv, request, request.need, request.ceiling, request.include_drafted, observer
        )
    except OrgPoolExhaustedError:
        try:
            park_for_reclaim(inv, request, receive_count)
        except (ParkedForReclaimError, OutOfTimeError):
            # Parked (or about to be) is waiting, not rejected, unless this receive is its last.
            _settle(observer, keep=inv.is_final_receive(receive_count))
            raise
        observer.commit()
        raise
    except Exception:
        observer.commit()
        raise
    observer.commit()
    return result


def _settle(observer: AttemptObserver, *, keep: bool) -> None:
    if keep:
        observer.commit()
    else:
        observer.discard()


def _call(
    inv: Invocation,
    request: EnsureRequest,
    need: Totals,
    ceiling: Ceiling | None,
    include_drafted: bool,
    observer: AttemptObserver,
) -> EnsureResult:
    return ensure_headroom(
        inv.ports.gateway,
        request.workspace_id,
        request.parent_workspace_id,
        need,
        inv.transfer_context(observer),
        ceiling=combine_ceilings(ceiling, inv.config.ceiling_backstop),
        blocks=inv.config.blocks,
        include_drafted=include_drafted,
        policy=inv.config.ensure_policy,
        is_unmetered=inv.ports.is_unmetered,
        exact_fallback=inv.config.tight_pool_fallback,
        is_parent_of=links.is_parent_of if (links := inv.ports.parent_links) else None,
    )
