"""Start a sweep run: list its targets from the upstream and write its first checkpoint.

Every refusal comes before anything is written: a run id already used by the other kind of run
(dry or real), and, for a real run, a parent held by another unfinished real run (checked
read-only first, so a refused concurrent run writes nothing).
"""

from __future__ import annotations

from ...domain.sweep.errors import SweepRefusedError
from ...domain.sweep.model import SweepRequest, checkpoint_name
from ...domain.sweep.runs import new_checkpoint
from .parent_claims import claim_parents
from .ports import SweepEnvironment
from .run_checkpoint import RunCheckpoint, hold_run, read_families


def start_sweep_run(
    request: SweepRequest, run_id: str, name: str, env: SweepEnvironment
) -> RunCheckpoint:
    """Create the run's checkpoint under ``name`` (which must not exist) and hold the run.

    Raises:
        SweepRefusedError: ``run_id`` is already a run of the other kind, or the upstream
            listed children the checkpoint cannot hold.
        ParentHeldError: a parent belongs to another unfinished real run.
        RunInProgressError: another invocation created the checkpoint first.
    """
    if env.store.load(checkpoint_name(run_id, not request.dry_run)) is not None:
        kind = "real" if request.dry_run else "dry"
        raise SweepRefusedError(
            f"run {run_id!r} is a {kind} run; start a new run_id to change dry_run"
        )
    if not request.dry_run:
        claim_parents(env.store, run_id, request.parent_workspace_ids, check_only=True)
    checkpoint = new_checkpoint(request, run_id, read_families(request, env))
    return hold_run(request, env, name, checkpoint, expected_etag=None)
