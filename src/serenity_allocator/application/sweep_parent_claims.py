"""One unfinished real sweep run per parent, recorded with conditional writes.

A real run claims each of its parents (a small document per parent, :func:`parent_claim_name`)
after its checkpoint exists, so whoever reads a claim can always read the claiming run's
checkpoint. A claim held by a run that is done or abandoned (or whose checkpoint is gone) is
free to take; any other claim refuses the new run, naming the holder. Writes are conditional:
of two runs claiming one parent at once, one write loses and that run is refused.

Claims are released by overwriting them (never deleted): the bucket keeps every version.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from ..domain.sweep_errors import CheckpointCorruptError, ParentHeldError, StaleCheckpointError
from ..domain.sweep_model import (
    ParentClaim,
    StoredCheckpoint,
    checkpoint_name,
    parent_claim_name,
    parse_checkpoint,
)
from ..domain.validation import describe_validation_error
from .sweep_ports import CheckpointStore


def claim_parents(
    store: CheckpointStore, run_id: str, parents: Sequence[str], *, check_only: bool = False
) -> None:
    """Make ``run_id`` the holder of every parent, or refuse and leave none newly claimed.

    Args:
        store: Where claims and checkpoints live.
        run_id: The claiming real run (its checkpoint must exist unless ``check_only``).
        parents: The run's parents.
        check_only: Only check that no other unfinished run holds one; write nothing.

    Raises:
        ParentHeldError: another unfinished run holds a parent (or won a race for it).
    """
    claimed: list[tuple[str, str]] = []
    for parent_id in sorted(set(parents)):
        name = parent_claim_name(parent_id)
        stored = store.load(name)
        holder = _holder(stored, name)
        if holder == run_id:
            continue
        if holder is not None and not _is_finished(store, holder):
            _release(store, run_id, claimed)
            raise ParentHeldError(parent_id, holder)
        if check_only:
            continue
        body = ParentClaim(parent_workspace_id=parent_id, run_id=run_id).model_dump(mode="json")
        try:
            etag = store.save(name, body, expected_etag=None if stored is None else stored.etag)
        except StaleCheckpointError:
            _release(store, run_id, claimed)
            now = _holder(store.load(name), name)
            raise ParentHeldError(parent_id, now or "(unknown)") from None
        claimed.append((parent_id, etag))


def release_parents(store: CheckpointStore, run_id: str, parents: Sequence[str]) -> list[str]:
    """Free every parent ``run_id`` still holds; return those freed.

    A claim another run has taken meanwhile is left alone; a lost race is left for the next
    claimer, who sees this run finished and takes the parent anyway.
    """
    freed: list[str] = []
    for parent_id in sorted(set(parents)):
        name = parent_claim_name(parent_id)
        stored = store.load(name)
        if stored is None or _holder(stored, name) != run_id:
            continue
        if _overwrite_released(store, run_id, parent_id, stored.etag):
            freed.append(parent_id)
    return freed


def _release(store: CheckpointStore, run_id: str, claimed: list[tuple[str, str]]) -> None:
    for parent_id, etag in claimed:
        _overwrite_released(store, run_id, parent_id, etag)


def _overwrite_released(store: CheckpointStore, run_id: str, parent_id: str, etag: str) -> bool:
    body = ParentClaim(parent_workspace_id=parent_id, run_id=None, released_by=run_id)
    try:
        store.save(parent_claim_name(parent_id), body.model_dump(mode="json"), expected_etag=etag)
    except StaleCheckpointError:
        return False
    return True


def _holder(stored: StoredCheckpoint | None, name: str) -> str | None:
    if stored is None:
        return None
    try:
        return ParentClaim.model_validate(stored.body).run_id
    except ValidationError as exc:
        raise CheckpointCorruptError(name, describe_validation_error(exc)) from None


def _is_finished(store: CheckpointStore, run_id: str) -> bool:
    """Done or abandoned; a holder whose checkpoint is gone holds nothing any more."""
    name = checkpoint_name(run_id, dry_run=False)
    stored = store.load(name)
    if stored is None:
        # Checkpoints are written before claims, so only an expired or deleted one is missing.
        return True
    return parse_checkpoint(stored.body, name).state in {"done", "abandoned"}
