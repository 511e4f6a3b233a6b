"""Run the next batch of a sweep run: start or resume it, attempt its targets, save progress.

Progress lives in a checkpoint written after every target with a conditional write, so an
invocation can stop anywhere (timeout, crash) and the same ``run_id`` resumes: at most the
target in flight is seen twice, and its release carries a deterministic request id that the
FIFO queue deduplicates. A target is done only on a terminal result; a failed one is retried on
a later invocation until it has used ``max_attempts``, then it ends ``failed``.

A real run claims its parents (one unfinished real run per parent) before it acts, and every
invocation re-checks its checkpoint against the payload and the upstream before anything is
enqueued (``start_sweep_run``, ``resume_sweep_run``).
"""

from __future__ import annotations

from ...domain.sweep.errors import RunCredentialStopError, SweepRefusedError
from ...domain.sweep.failures import attempts_so_far, note_progress
from ...domain.sweep.model import (
    SweepCheckpoint,
    SweepItem,
    SweepRequest,
    SweepResult,
    checkpoint_name,
)
from ...domain.sweep.runs import sweep_result
from .parent_claims import release_parents
from .ports import SweepEnvironment
from .resume_run import resume_sweep_run
from .run_checkpoint import RunCheckpoint
from .start_run import start_sweep_run
from .target import sweep_target


def run_sweep_batch(request: SweepRequest, run_id: str, env: SweepEnvironment) -> SweepResult:
    """Process the next batch of the run ``run_id``; resumable, at most one target in flight.

    Raises:
        SweepRefusedError: a real run while the kill switch is off (unless allowed), a run id
            reused across a dry and a real run, a resume with another payload, an abandoned
            run.
        ParentHeldError: a parent belongs to another unfinished real run.
        RunInProgressError: another invocation holds the run.
        CheckpointCorruptError: the checkpoint breaks its schema, is not this run's, holds a
            lease no invocation could hold, or names targets that are not children of their
            parents; nothing is enqueued.
        SweepNeedsReauthError: IMS refused the run's promise token (scrubbed; resume with a
            new one). SweepNoCredentialError: the run's claim holds no token.
        SweepImsUnavailableError: IMS could not exchange the token in time.
    """
    if not request.dry_run and not env.dynamic_allocation and not request.allow_when_disabled:
        # Children lowered while just-in-time allocation is off could not be topped back up.
        raise SweepRefusedError(
            "a real sweep refuses to start while SERENITY_DYNAMIC_ALLOCATION is off; "
            "set allow_when_disabled to override"
        )
    run = _open_run(request, run_id, env)
    checkpoint = run.checkpoint
    items: list[SweepItem] = []
    if checkpoint.state == "open":
        items = _process_batch_or_give_back(request, env, run)
    if checkpoint.state == "open" and len(checkpoint.processed) == len(checkpoint.targets):
        checkpoint.state = "done"  # also a run with no target at all
    checkpoint.lease_owner, checkpoint.lease_until = None, None
    run.save()
    _release_what_the_run_holds(run_id, checkpoint, env)
    return sweep_result(run_id, checkpoint, items, env.store.location(run.name))


def _release_what_the_run_holds(
    run_id: str, checkpoint: SweepCheckpoint, env: SweepEnvironment
) -> None:
    """A done run frees its parents; a done or aborted run ends its hold on its token."""
    done = checkpoint.state == "done"
    if done and not checkpoint.dry_run:
        release_parents(env.store, run_id, checkpoint.parent_workspace_ids)
    if env.run_tokens is not None and (done or checkpoint.aborted is not None):
        # The run's operator authority must not outlive it (a resume hands a new one over).
        env.run_tokens.end(run_id, "aborted" if checkpoint.aborted else "done")


def _open_run(request: SweepRequest, run_id: str, env: SweepEnvironment) -> RunCheckpoint:
    """Load or start the run; every refusal comes before the first upstream call."""
    name = checkpoint_name(run_id, request.dry_run)
    stored = env.store.load(name)
    if stored is None:
        return start_sweep_run(request, run_id, name, env)
    return resume_sweep_run(request, run_id, name, stored, env)


def _process_batch_or_give_back(
    request: SweepRequest, env: SweepEnvironment, run: RunCheckpoint
) -> list[SweepItem]:
    try:
        return _process_batch(request, env, run)
    except RunCredentialStopError:
        # The run's credential stopped the batch: give the run back for the resume.
        run.checkpoint.lease_owner, run.checkpoint.lease_until = None, None
        run.save()
        raise


def _process_batch(
    request: SweepRequest, env: SweepEnvironment, run: RunCheckpoint
) -> list[SweepItem]:
    checkpoint = run.checkpoint
    floor = request.floor or env.blocks.as_totals()
    items: list[SweepItem] = []
    done_ids = set(checkpoint.processed)  # once, not per target: a fleet run has thousands
    # Fresh targets first, retries after (stable): a failing child does not starve the rest.
    pending = sorted(
        (t for t in checkpoint.targets if t[0] not in done_ids),
        key=lambda t: attempts_so_far(checkpoint, t[0]),
    )
    for index, target in enumerate(pending[: request.batch_size]):
        pause_s = request.rate_limit_ms / 1000.0 if index else 0.0
        if env.clock() + pause_s + env.target_budget_s > env.deadline:
            # Leave the rest for the next invocation rather than be cut mid-target; the pause
            # counts too (up to 60 s), or a long one would start a target it cannot finish.
            break
        if pause_s:
            env.sleep(pause_s)
        item = sweep_target(request, checkpoint, target, floor, env)
        items.append(item)
        if env.on_item is not None:
            env.on_item(item)
        note_progress(request, checkpoint, item)
        run.save()
        if checkpoint.aborted:
            break
    return items
