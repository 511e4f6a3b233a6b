"""Abandon a sweep run: mark its checkpoint abandoned for good and free its parents.

Also the operator's way out of an unreadable document, without restoring S3 versions by hand:
an unreadable checkpoint is replaced by an abandoned marker (its parents' claims are then free
to take), and an abandon by parent clears an unreadable claim. The bucket keeps every version
of what was replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...domain.sweep.errors import (
    CheckpointCorruptError,
    RunInProgressError,
    StaleCheckpointError,
    SweepRefusedError,
)
from ...domain.sweep.model import (
    AbandonedUnreadableCheckpoint,
    StoredCheckpoint,
    SweepAbandonRequest,
    SweepAbandonResult,
    SweepParentAbandonRequest,
    checkpoint_name,
    is_abandoned_marker,
    parent_claim_name,
    parse_checkpoint,
)
from ...domain.sweep.runs import lease_is_held
from .parent_claims import clear_unreadable_claim, read_claim, release_parents
from .ports import SweepEnvironment

DEFAULT_REASON = "abandoned by an operator"


@dataclass(frozen=True)
class _RunCheckpoint:
    """Where a run's checkpoint is stored: its name, real or dry."""

    run_id: str
    name: str
    dry_run: bool


def abandon_sweep_run(
    request: SweepAbandonRequest | SweepParentAbandonRequest, env: SweepEnvironment
) -> SweepAbandonResult:
    """End an unfinished run for good: mark its checkpoint abandoned, free its parents.

    Idempotent: abandoning an abandoned run frees whatever claim it still holds. By parent:
    abandons the run holding the parent, or clears the parent's claim if it is unreadable.

    Raises:
        SweepRefusedError: there is no such run, it is done, or the parent is held by none.
        RunInProgressError: an invocation of the run holds its lease now, or the document
            changed while it was being replaced.
    """
    if isinstance(request, SweepParentAbandonRequest):
        return _abandon_by_parent(request.parent_workspace_id, request.reason, env)
    return _abandon_run(request.run_id, request.reason, env)


def _abandon_by_parent(
    parent_id: str, reason: str | None, env: SweepEnvironment
) -> SweepAbandonResult:
    claim = read_claim(env.store, parent_id)
    if claim.holder is not None:
        return _abandon_run(claim.holder, reason, env)
    if claim.problem is None:
        raise SweepRefusedError(f"parent {parent_id!r} is held by no run; nothing to abandon")
    if not clear_unreadable_claim(env.store, claim):
        raise SweepRefusedError(
            f"the claim of parent {parent_id!r} changed while it was being cleared; read it again"
        )
    return SweepAbandonResult(
        run_id=None,
        dry_run=False,
        released_parents=[parent_id],
        checkpoint=env.store.location(parent_claim_name(parent_id)),
        unreadable=claim.problem,
    )


def _abandon_run(run_id: str, reason: str | None, env: SweepEnvironment) -> SweepAbandonResult:
    where, stored = _find_run_checkpoint(run_id, env)
    name, dry_run = where.name, where.dry_run
    if isinstance(stored, CheckpointCorruptError):
        return _replace_unreadable(where, stored.problem, stored.etag, reason, env)
    if is_abandoned_marker(stored.body):
        # Abandoned before, over an unreadable checkpoint: nothing left to mark.
        return _result(where, None, env)
    try:
        checkpoint = parse_checkpoint(stored.body, name)
    except CheckpointCorruptError as exc:
        return _replace_unreadable(where, exc.problem, stored.etag, reason, env)
    if checkpoint.run_id != run_id:
        # Only a copy (or an edit) puts another run's checkpoint under this name.
        return _replace_unreadable(where, "it belongs to another run", stored.etag, reason, env)
    if checkpoint.state == "done":
        raise SweepRefusedError(f"run {run_id!r} is done; there is nothing to abandon")
    if lease_is_held(checkpoint.lease_until, env.wall_clock(), env.max_lease_s):
        raise RunInProgressError(run_id)
    checkpoint.state = "abandoned"
    checkpoint.abandon_reason = reason or DEFAULT_REASON
    checkpoint.lease_owner, checkpoint.lease_until = None, None
    _save(env, run_id, name, checkpoint.model_dump(mode="json"), stored.etag)
    released = (
        [] if dry_run else release_parents(env.store, run_id, checkpoint.parent_workspace_ids)
    )
    _end_token(run_id, env)
    return SweepAbandonResult(
        run_id=run_id,
        dry_run=dry_run,
        released_parents=released,
        processed=len(checkpoint.processed),
        total=len(checkpoint.targets),
        checkpoint=env.store.location(name),
    )


def _replace_unreadable(
    where: _RunCheckpoint,
    problem: str,
    etag: str | None,
    reason: str | None,
    env: SweepEnvironment,
) -> SweepAbandonResult:
    """Write the abandoned marker over exactly the unreadable version; its parents go free.

    The lease of an unreadable checkpoint cannot be read: an invocation still working on it
    (none can resume it) loses its next conditional save and stops.
    """
    run_id, name = where.run_id, where.name
    if etag is None:
        raise SweepRefusedError(
            f"checkpoint {name!r} is unreadable ({problem}) and the store gave no version to "
            "replace; restore a good version from the bucket instead"
        )
    marker = AbandonedUnreadableCheckpoint(
        run_id=run_id, abandon_reason=reason or DEFAULT_REASON, unreadable=problem
    )
    _save(env, run_id, name, marker.model_dump(mode="json"), etag)
    return _result(where, problem, env)


def _end_token(run_id: str, env: SweepEnvironment) -> None:
    if env.run_tokens is not None:
        env.run_tokens.end(run_id, "abandoned")


def _result(
    where: _RunCheckpoint, problem: str | None, env: SweepEnvironment
) -> SweepAbandonResult:
    # Its parents are unknown: every claim it holds is free to take now that it is finished.
    _end_token(where.run_id, env)
    return SweepAbandonResult(
        run_id=where.run_id,
        dry_run=where.dry_run,
        released_parents=[],
        checkpoint=env.store.location(where.name),
        unreadable=problem,
    )


def _save(
    env: SweepEnvironment, run_id: str, name: str, body: dict[str, object], etag: str
) -> None:
    try:
        env.store.save(name, body, expected_etag=etag)
    except StaleCheckpointError as exc:
        raise RunInProgressError(run_id) from exc


def _find_run_checkpoint(
    run_id: str, env: SweepEnvironment
) -> tuple[_RunCheckpoint, StoredCheckpoint | CheckpointCorruptError]:
    """Where the run's checkpoint is, real or dry, and what it holds (or why it cannot be read)."""
    for dry_run in (False, True):
        where = _RunCheckpoint(run_id, checkpoint_name(run_id, dry_run), dry_run)
        try:
            stored = env.store.load(where.name)
        except CheckpointCorruptError as exc:
            return where, exc
        if stored is not None:
            return where, stored
    raise SweepRefusedError(f"there is no run {run_id!r} to abandon")
