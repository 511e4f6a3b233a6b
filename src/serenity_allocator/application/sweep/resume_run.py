"""Resume a sweep run from its stored checkpoint, after checking it is sound and this payload's.

Nothing is enqueued before the checks pass: the checkpoint must parse, be this run's, hold no
lease of another live invocation (nor one no invocation could hold), have been started by the
same payload, and (while open) name only targets that are still children of their parents
upstream.
"""

from __future__ import annotations

from ...domain.sweep.errors import SweepRefusedError
from ...domain.sweep.model import (
    StoredCheckpoint,
    SweepRequest,
    is_abandoned_marker,
    parse_checkpoint,
)
from ...domain.sweep.runs import ResumingInvocation, check_resumable, verify_targets
from .ports import SweepEnvironment
from .run_checkpoint import RunCheckpoint, hold_run, read_families


def resume_sweep_run(
    request: SweepRequest,
    run_id: str,
    name: str,
    stored: StoredCheckpoint,
    env: SweepEnvironment,
) -> RunCheckpoint:
    """Check the stored checkpoint, then take the run's lease over the version read.

    Raises:
        CheckpointCorruptError: the checkpoint breaks its schema, is not this run's, holds a
            lease no invocation could hold, or names targets that are not children of their
            parents.
        SweepRefusedError: another payload, or an abandoned run.
        RunInProgressError: another invocation holds the run.
        ParentHeldError: a parent belongs to another unfinished real run.
    """
    if is_abandoned_marker(stored.body):
        raise SweepRefusedError(f"run {run_id!r} was abandoned; start a new run_id")
    checkpoint = parse_checkpoint(stored.body, name)
    check_resumable(
        checkpoint,
        request,
        run_id,
        name,
        ResumingInvocation(
            invocation_id=env.invocation_id, now=env.wall_clock(), max_lease_s=env.max_lease_s
        ),
    )
    if checkpoint.state == "open":
        verify_targets(checkpoint, read_families(request, env), name, request.limit)
    return hold_run(request, env, name, checkpoint, expected_etag=stored.etag)
