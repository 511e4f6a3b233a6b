"""One unfinished real sweep run per parent, recorded with conditional writes.

A real run claims each of its parents (a small document per parent, ``parent_claim_name``)
after its checkpoint exists, so whoever reads a claim can always read the claiming run's
checkpoint. A claim held by a run that is done or abandoned (or whose checkpoint is gone) is
free to take; any other claim refuses the new run, naming the holder. Writes are conditional:
of two runs claiming one parent at once, one write loses and that run is refused.

An unreadable claim, or a claim whose holder's checkpoint is unreadable, refuses only the runs
on that parent, naming the document and the abandon that clears it; it never raises out of
releasing (a done or abandoned run leaves it for the operator).

Claims are released by overwriting them (never deleted): the bucket keeps every version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from ...domain.messages import describe_validation_error
from ...domain.sweep.errors import (
    CheckpointCorruptError,
    ParentClaimUnreadableError,
    ParentHeldError,
    ParentHolderUnreadableError,
    StaleCheckpointError,
)
from ...domain.sweep.model import (
    ParentClaim,
    checkpoint_name,
    is_abandoned_marker,
    parent_claim_name,
    parse_checkpoint,
)
from .ports import CheckpointStore


@dataclass(frozen=True)
class ClaimRead:
    """A parent's claim as read: its holder and version, or why it cannot be read."""

    parent_id: str
    holder: str | None
    etag: str | None
    """None: there is no claim yet (or, with ``problem``, the store did not say)."""
    problem: str | None = None


def read_claim(store: CheckpointStore, parent_id: str) -> ClaimRead:
    """Read a parent's claim; an unreadable one comes back with its problem, never raised."""
    name = parent_claim_name(parent_id)
    try:
        stored = store.load(name)
    except CheckpointCorruptError as exc:
        return ClaimRead(parent_id, None, exc.etag, problem=exc.problem)
    if stored is None:
        return ClaimRead(parent_id, None, None)
    try:
        holder = ParentClaim.model_validate(stored.body).run_id
    except ValidationError as exc:
        return ClaimRead(parent_id, None, stored.etag, problem=describe_validation_error(exc))
    return ClaimRead(parent_id, holder, stored.etag)


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
        ParentHeldError: another unfinished run holds a parent (or won a race for it), or the
            holder's checkpoint is unreadable (``ParentHolderUnreadableError``).
        ParentClaimUnreadableError: a parent's claim cannot be read.
    """
    claimed: list[tuple[str, str]] = []
    for parent_id in sorted(set(parents)):
        claim = read_claim(store, parent_id)
        if claim.holder == run_id:
            continue
        try:
            _refuse_unless_free(store, claim)
        except (ParentHeldError, ParentClaimUnreadableError):
            _release(store, run_id, claimed)
            raise
        if check_only:
            continue
        claimed.append((parent_id, _take(store, run_id, claim, claimed)))


def _refuse_unless_free(store: CheckpointStore, claim: ClaimRead) -> None:
    if claim.problem is not None:
        location = store.location(parent_claim_name(claim.parent_id))
        raise ParentClaimUnreadableError(claim.parent_id, location, claim.problem)
    if claim.holder is not None and not _is_finished(store, claim.parent_id, claim.holder):
        raise ParentHeldError(claim.parent_id, claim.holder)


def _take(
    store: CheckpointStore, run_id: str, claim: ClaimRead, claimed: list[tuple[str, str]]
) -> str:
    body = ParentClaim(parent_workspace_id=claim.parent_id, run_id=run_id).model_dump(mode="json")
    try:
        return store.save(parent_claim_name(claim.parent_id), body, expected_etag=claim.etag)
    except StaleCheckpointError:
        _release(store, run_id, claimed)
        now = read_claim(store, claim.parent_id).holder
        raise ParentHeldError(claim.parent_id, now or "(unknown)") from None


def release_parents(store: CheckpointStore, run_id: str, parents: Sequence[str]) -> list[str]:
    """Free every parent ``run_id`` still holds; return those freed.

    A claim another run has taken meanwhile is left alone; a lost race is left for the next
    claimer, who sees this run finished and takes the parent anyway. An unreadable claim is
    left alone too: only an operator's abandon by parent clears it.
    """
    freed: list[str] = []
    for parent_id in sorted(set(parents)):
        claim = read_claim(store, parent_id)
        if claim.holder != run_id or claim.etag is None:
            continue
        if _overwrite_released(store, run_id, parent_id, claim.etag):
            freed.append(parent_id)
    return freed


def clear_unreadable_claim(store: CheckpointStore, claim: ClaimRead) -> bool:
    """Overwrite an unreadable claim with a released one (conditional on its version)."""
    if claim.etag is None:
        return False
    body = ParentClaim(parent_workspace_id=claim.parent_id, run_id=None)
    try:
        store.save(
            parent_claim_name(claim.parent_id),
            body.model_dump(mode="json"),
            expected_etag=claim.etag,
        )
    except StaleCheckpointError:
        return False
    return True


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


def _is_finished(store: CheckpointStore, parent_id: str, run_id: str) -> bool:
    """Done or abandoned; a holder whose checkpoint is gone holds nothing any more.

    Raises:
        ParentHolderUnreadableError: the holder's checkpoint cannot be read.
    """
    name = checkpoint_name(run_id, dry_run=False)
    try:
        stored = store.load(name)
        if stored is None:
            # Checkpoints are written before claims, so only an expired or deleted one is
            # missing.
            return True
        if is_abandoned_marker(stored.body):
            return True
        return parse_checkpoint(stored.body, name).state in {"done", "abandoned"}
    except CheckpointCorruptError as exc:
        raise ParentHolderUnreadableError(parent_id, run_id, exc.problem) from None
