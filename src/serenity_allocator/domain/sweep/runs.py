"""The rules of a sweep run's checkpoint: its targets, and when it may be resumed or abandoned.

Pure: the use cases in ``application/`` read the upstream's families and the stored checkpoint
and hand them here. A run's targets are fixed when it starts (the direct children of each
listed pool, narrowed by ``workspace_ids`` and ``limit``); every later invocation checks that the
stored checkpoint is this run's and this payload's, that no other invocation holds its lease,
and that every target still to act on is still a child of its parent upstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from ..messages import describe_validation_error
from .errors import CheckpointCorruptError, RunInProgressError, SweepRefusedError
from .model import (
    MAX_FAILED_LISTED,
    FailedTarget,
    SweepCheckpoint,
    SweepItem,
    SweepRequest,
    SweepResult,
    payload_sha256,
)

MAX_LEASE_S = 900.0 + 60.0
"""The furthest a sound lease can lie ahead: Lambda's longest invocation plus a margin for
clock skew between invocations. A lease further ahead is corrupt, not a lock forever."""

Families = Mapping[str, Sequence[str]]
"""The direct children of each listed parent, in listing order, as the upstream says now."""


def release_request_id(run_id: str, workspace_id: str) -> str:
    """The deterministic id of a sweep release: a resumed run re-enqueues the same id."""
    return f"{run_id}.{workspace_id}"


# ---------------------------------------------------------------- a new run


def new_checkpoint(request: SweepRequest, run_id: str, families: Families) -> SweepCheckpoint:
    """The checkpoint of a run that starts now, its targets listed from ``families``.

    Raises:
        SweepRefusedError: the upstream listed children the checkpoint cannot hold.
    """
    try:
        return SweepCheckpoint(
            run_id=run_id,
            dry_run=request.dry_run,
            parent_workspace_ids=list(request.parent_workspace_ids),
            workspace_ids=None if request.workspace_ids is None else list(request.workspace_ids),
            payload_sha256=payload_sha256(request),
            targets=list_targets(request, families),
        )
    except ValidationError as exc:
        # Only the upstream's listing can break it (the payload was validated at the edge).
        raise SweepRefusedError(
            f"the upstream listed children the sweep cannot take: {describe_validation_error(exc)}"
        ) from None


def list_targets(request: SweepRequest, families: Families) -> list[tuple[str, str]]:
    """Direct children of each listed pool (parents excluded), narrowed and limited."""
    targets: list[tuple[str, str]] = []
    seen: set[str] = set()
    for parent_id, children in families.items():
        for child_id in children:
            if child_id not in seen:
                seen.add(child_id)
                targets.append((child_id, parent_id))
    if request.workspace_ids is not None:
        wanted = list(dict.fromkeys(request.workspace_ids))
        by_id = dict(targets)
        # An id that is not a child of a listed parent is reported, not swept: keep it as a
        # target with no parent so it shows up in the report once.
        targets = [(w, by_id.get(w, "")) for w in wanted]
    if request.limit is not None:
        targets = targets[: request.limit]
    return targets


# ---------------------------------------------------------------- a resumed run


@dataclass(frozen=True)
class ResumingInvocation:
    """The invocation asking to resume a run.

    Its id, its wall-clock ``now``, and the longest lease any invocation may hold.
    """

    invocation_id: str
    now: float
    max_lease_s: float = MAX_LEASE_S


def check_resumable(
    checkpoint: SweepCheckpoint,
    request: SweepRequest,
    run_id: str,
    name: str,
    invocation: ResumingInvocation,
) -> None:
    """Refuse a stored checkpoint ``invocation`` may not continue; then clear its abort.

    Raises:
        CheckpointCorruptError: another run's checkpoint, or a lease no invocation could hold.
        SweepRefusedError: another payload, or an abandoned run.
        RunInProgressError: another invocation holds its lease now.
    """
    if checkpoint.run_id != run_id or checkpoint.dry_run != request.dry_run:
        # Only a copy (or an edit) puts another run's checkpoint under this name.
        raise CheckpointCorruptError(name, "it belongs to another run")
    lease, now = checkpoint.lease_until, invocation.now
    if lease is not None and lease > now + invocation.max_lease_s:
        raise CheckpointCorruptError(name, "its lease lies beyond any invocation's deadline")
    if not is_same_payload(checkpoint, request):
        raise SweepRefusedError(
            f"run {run_id!r} was started with another payload (parents, workspace_ids, limit "
            "or floor differ); resume it with its own payload or start a new run_id"
        )
    if checkpoint.state == "abandoned":
        raise SweepRefusedError(f"run {run_id!r} was abandoned; start a new run_id")
    if lease is not None and lease > now and checkpoint.lease_owner != invocation.invocation_id:
        raise RunInProgressError(run_id)
    checkpoint.aborted = None  # resuming an aborted run is the operator's decision
    checkpoint.error_streak = 0


def is_same_payload(checkpoint: SweepCheckpoint, request: SweepRequest) -> bool:
    """True when ``request`` defines the same run as the payload that started ``checkpoint``."""
    return (
        checkpoint.parent_workspace_ids == list(request.parent_workspace_ids)
        and checkpoint.workspace_ids == request.workspace_ids
        and checkpoint.payload_sha256 == payload_sha256(request)
    )


def verify_targets(
    checkpoint: SweepCheckpoint, families: Families, name: str, limit: int | None
) -> None:
    """Every target still to act on is a child of its parent, re-read from the upstream.

    Raises:
        CheckpointCorruptError: a target is not a child of its parent, or too many targets.
    """
    done = set(checkpoint.processed)
    children = {parent: set(ids) for parent, ids in families.items()}
    strangers = [
        child
        for child, parent in checkpoint.targets
        if parent and child not in done and child not in children.get(parent, set())
    ]
    if strangers:
        raise CheckpointCorruptError(
            name, f"{len(strangers)} target(s) are not children of their parent upstream"
        )
    if limit is not None and len(checkpoint.targets) > limit:
        raise CheckpointCorruptError(name, "it holds more targets than the run's limit")


def lease_is_held(lease_until: float | None, now: float, max_lease_s: float = MAX_LEASE_S) -> bool:
    """True while a sound lease runs (one beyond any invocation's deadline holds nothing)."""
    return lease_until is not None and now < lease_until <= now + max_lease_s


# ---------------------------------------------------------------- the result


def sweep_result(
    run_id: str, checkpoint: SweepCheckpoint, items: list[SweepItem], location: str
) -> SweepResult:
    """What an invocation returns: progress, counts, this batch's items and the failed list."""
    parents = dict(checkpoint.targets)
    failed = [
        FailedTarget(
            workspace_id=child,
            parent_workspace_id=parents.get(child) or None,
            error_code=failure.error_code,
            attempts=failure.attempts,
        )
        for child, failure in checkpoint.failures.items()
        if failure.final
    ]
    return SweepResult(
        run_id=run_id,
        dry_run=checkpoint.dry_run,
        done=checkpoint.state == "done",
        aborted=checkpoint.aborted is not None,
        abort_reason=checkpoint.aborted,
        processed=len(checkpoint.processed),
        remaining=len(checkpoint.targets) - len(checkpoint.processed),
        total=len(checkpoint.targets),
        counts=checkpoint.counts,
        items=items,
        failed=failed[:MAX_FAILED_LISTED],
        failed_listed_all=len(failed) <= MAX_FAILED_LISTED,
        checkpoint=location,
    )
