"""One attempt on one sweep target: preview its release, then (a real run) enqueue it.

The sweep never transfers. Each target gets a read-only ``release_surplus`` preview (the single
source of truth for the release math); a real run enqueues a release into the child's own FIFO
group with a deterministic request id, so a resumed run re-sends the same id and the queue
deduplicates it. 429s are backed off within the target's budget; any other failure is
classified and counted by the domain's failure rules.
"""

from __future__ import annotations

from ...domain.allocation import ReleaseAsk, ReleaseRules, release_surplus
from ...domain.errors import RateLimitedError, UpstreamError
from ...domain.model import Totals, WorkspaceStatus
from ...domain.observations import CredentialOutcome
from ...domain.ports import NullObserver
from ...domain.sweep.errors import SweepImsUnavailableError, SweepRefusedError
from ...domain.sweep.failures import (
    backoff_delay,
    classify_failure,
    finish_target,
    is_access_denied,
    is_rate_limited_error,
    record_access_denied,
    record_failure,
    record_success,
)
from ...domain.sweep.model import SweepCheckpoint, SweepCountName, SweepItem, SweepRequest
from ...domain.sweep.runs import release_request_id
from ...domain.transfer import TransferContext
from .ports import SweepEnvironment


def sweep_target(
    request: SweepRequest,
    checkpoint: SweepCheckpoint,
    target: tuple[str, str],
    floor: Totals,
    env: SweepEnvironment,
) -> SweepItem:
    """Attempt ``target`` (child id, parent id) and record its result in ``checkpoint``."""
    child_id, parent_id = target
    if not parent_id:
        finish_target(checkpoint, child_id, "not_a_child")
        return SweepItem(workspace_id=child_id, outcome="not-a-child")
    item = SweepItem(workspace_id=child_id, parent_workspace_id=parent_id, outcome="")
    try:
        item, count = _with_backoff(request, checkpoint.run_id, floor, env, item)
    except (SweepRefusedError, SweepImsUnavailableError):
        raise  # the run's credential stopped the batch (a re-exchange after a 401 failed)
    except Exception as exc:
        if is_access_denied(exc):
            env.observer.record(CredentialOutcome("accessDenied"))
            return record_access_denied(checkpoint, item)
        return record_failure(request, checkpoint, item, classify_failure(exc))
    record_success(checkpoint, child_id, count)
    if item.tiered:
        # Its own count, never an error: a tiered answer is a known shape (the abort rule
        # counts only failures).
        checkpoint.counts.add("tiered")
    return item


def _with_backoff(
    request: SweepRequest, run_id: str, floor: Totals, env: SweepEnvironment, item: SweepItem
) -> tuple[SweepItem, SweepCountName]:
    """One attempt on a target; 429s back off (``Retry-After`` first) within their budget."""
    waited = 0.0
    retry = 0
    while True:
        try:
            return _preview_and_act(request, run_id, floor, env, item)
        except (UpstreamError, RateLimitedError) as exc:
            if not is_rate_limited_error(exc):
                raise
            delay = backoff_delay(exc, request, retry)
            fits = env.clock() + delay + env.target_budget_s <= env.deadline
            if waited + delay > request.rate_limit_backoff_s or not fits:
                raise  # the budget is spent: this attempt fails and counts toward the abort
            env.sleep(delay)
            waited += delay
            retry += 1


def _preview_and_act(
    request: SweepRequest, run_id: str, floor: Totals, env: SweepEnvironment, item: SweepItem
) -> tuple[SweepItem, SweepCountName]:
    child_id = item.workspace_id
    status = env.gateway.read_status(child_id)
    if status != WorkspaceStatus.CREATED:
        # Zombies and settling children are left alone: a release would only race them.
        return item.model_copy(
            update={"outcome": "skipped-not-created", "error_code": status}
        ), "skipped_not_created"
    preview = release_surplus(
        env.gateway,
        ReleaseAsk(child_id, floor=floor, dry_run=True),
        TransferContext(
            clock=env.clock,
            sleep=env.sleep,
            deadline=env.deadline,
            observer=env.observer if request.dry_run else NullObserver(),
        ),
        ReleaseRules(blocks=env.blocks),
    )
    plan = preview.plan
    assert plan is not None  # a dry run always carries its plan
    item = item.model_copy(
        update={
            "before": plan.before,
            "target": plan.target,
            "units_returned": plan.units_returned,
            # The plan leaves a tiered child's prompts alone; the release it enqueues does too.
            "tiered": True if plan.tiered else None,
        }
    )
    outcome = plan.natural_outcome
    if outcome == "requires-decommission":
        return item.model_copy(update={"outcome": outcome}), "requires_decommission"
    if outcome != "released":
        return item.model_copy(update={"outcome": "nothing-to-release"}), "nothing_to_release"
    if request.dry_run:
        return item.model_copy(update={"outcome": "would-release"}), "would_release"
    request_id = env.enqueuer.enqueue_release(
        child_id,
        floor=floor,
        source="sweep",
        run_id=run_id,
        request_id=release_request_id(run_id, child_id),
    )
    return item.model_copy(update={"outcome": "enqueued", "request_id": request_id}), "enqueued"
