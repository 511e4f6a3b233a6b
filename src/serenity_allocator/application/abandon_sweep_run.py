"""Abandon a sweep run: mark its checkpoint abandoned for good and free its parents."""

from __future__ import annotations

from ..domain.sweep_errors import (
    CheckpointCorruptError,
    RunInProgressError,
    StaleCheckpointError,
    SweepRefusedError,
)
from ..domain.sweep_model import (
    StoredCheckpoint,
    SweepAbandonRequest,
    SweepAbandonResult,
    checkpoint_name,
    parse_checkpoint,
)
from ..domain.sweep_runs import lease_is_held
from .sweep_parent_claims import release_parents
from .sweep_ports import SweepEnvironment


def abandon_sweep_run(request: SweepAbandonRequest, env: SweepEnvironment) -> SweepAbandonResult:
    """End an unfinished run for good: mark its checkpoint abandoned, free its parents.

    Idempotent: abandoning an abandoned run frees whatever claim it still holds.

    Raises:
        SweepRefusedError: there is no such run, or it is done.
        RunInProgressError: an invocation of the run holds its lease now.
        CheckpointCorruptError: its checkpoint cannot be read as one (restore a good version).
    """
    run_id = request.run_id
    name, stored, dry_run = _find_run_checkpoint(run_id, env)
    checkpoint = parse_checkpoint(stored.body, name)
    if checkpoint.run_id != run_id:
        raise CheckpointCorruptError(name, "it belongs to another run")
    if checkpoint.state == "done":
        raise SweepRefusedError(f"run {run_id!r} is done; there is nothing to abandon")
    if lease_is_held(checkpoint.lease_until, env.wall_clock(), env.max_lease_s):
        raise RunInProgressError(run_id)
    checkpoint.state = "abandoned"
    checkpoint.abandon_reason = request.reason or "abandoned by an operator"
    checkpoint.lease_owner, checkpoint.lease_until = None, None
    try:
        env.store.save(name, checkpoint.model_dump(mode="json"), expected_etag=stored.etag)
    except StaleCheckpointError as exc:
        raise RunInProgressError(run_id) from exc
    released = (
        [] if dry_run else release_parents(env.store, run_id, checkpoint.parent_workspace_ids)
    )
    return SweepAbandonResult(
        run_id=run_id,
        dry_run=dry_run,
        released_parents=released,
        processed=len(checkpoint.processed),
        total=len(checkpoint.targets),
        checkpoint=env.store.location(name),
    )


def _find_run_checkpoint(run_id: str, env: SweepEnvironment) -> tuple[str, StoredCheckpoint, bool]:
    """The run's checkpoint, real or dry, with its name and whether it is a dry run."""
    for dry_run in (False, True):
        name = checkpoint_name(run_id, dry_run)
        stored = env.store.load(name)
        if stored is not None:
            return name, stored, dry_run
    raise SweepRefusedError(f"there is no run {run_id!r} to abandon")
