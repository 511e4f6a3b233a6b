"""A sweep run's checkpoint in the store: conditional saves, the lease, the parents' claims.

Shared by the use cases that open a run (``start_sweep_run``, ``resume_sweep_run``) and the
one that works through it (``run_sweep_batch``). Every save is conditional on the version the
invocation last wrote, so a second invocation of the same run loses its next save and stops.
"""

from __future__ import annotations

from ...domain.sweep.errors import (
    ParentClaimUnreadableError,
    ParentHeldError,
    RunInProgressError,
    StaleCheckpointError,
)
from ...domain.sweep.model import SweepCheckpoint, SweepRequest
from .parent_claims import claim_parents
from .ports import SweepEnvironment


class RunCheckpoint:
    """The checkpoint plus its version tag; every save is conditional on the last one."""

    def __init__(
        self, env: SweepEnvironment, name: str, checkpoint: SweepCheckpoint, etag: str
    ) -> None:
        self._env = env
        self.name = name
        self.checkpoint = checkpoint
        self._etag = etag

    def save(self) -> None:
        """Write the checkpoint over the version this invocation wrote last.

        Raises:
            RunInProgressError: another invocation wrote it since.
        """
        try:
            self._etag = self._env.store.save(
                self.name, self.checkpoint.model_dump(mode="json"), expected_etag=self._etag
            )
        except StaleCheckpointError as exc:
            raise RunInProgressError(self.checkpoint.run_id) from exc


def read_families(request: SweepRequest, env: SweepEnvironment) -> dict[str, list[str]]:
    """The direct children of each listed parent, in listing order, as the upstream says now."""
    return {
        parent_id: [r.id for r in env.gateway.list_family(parent_id) if r.parent_id == parent_id]
        for parent_id in dict.fromkeys(request.parent_workspace_ids)
    }


def hold_run(
    request: SweepRequest,
    env: SweepEnvironment,
    name: str,
    checkpoint: SweepCheckpoint,
    expected_etag: str | None,
) -> RunCheckpoint:
    """Take the run's lease in its checkpoint, then (a real run) claim its parents.

    Raises:
        RunInProgressError: another invocation wrote the checkpoint first.
        ParentHeldError: a parent belongs to another unfinished real run (the lease is given
            back first).
        ParentClaimUnreadableError: a parent's claim cannot be read (the lease is given back).
    """
    # Capped, so this invocation never writes a lease the next reader would call corrupt.
    lease_until = min(env.lease_until, env.wall_clock() + env.max_lease_s)
    checkpoint.lease_owner, checkpoint.lease_until = env.invocation_id, lease_until
    try:
        etag = env.store.save(name, checkpoint.model_dump(mode="json"), expected_etag=expected_etag)
    except StaleCheckpointError as exc:
        raise RunInProgressError(checkpoint.run_id) from exc
    run = RunCheckpoint(env, name, checkpoint, etag)
    if not request.dry_run and checkpoint.state == "open":
        try:
            claim_parents(env.store, checkpoint.run_id, checkpoint.parent_workspace_ids)
        except (ParentHeldError, ParentClaimUnreadableError):
            checkpoint.lease_owner, checkpoint.lease_until = None, None
            run.save()
            raise
    return run
