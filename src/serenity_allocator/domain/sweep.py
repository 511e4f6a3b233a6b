"""The rightsizing sweep: preview every child of the listed pools, enqueue the releases.

The sweep never transfers. Each target gets a read-only :func:`release_surplus` preview (the
single source of truth for the release math); a real run enqueues a release message into the
child's own FIFO group, so the release is serialized with every ensure on that child and the
worker re-reads and recomputes when it applies it.

Progress lives in a checkpoint written after every target with a conditional write, so an
invocation can stop anywhere (timeout, crash) and the same ``run_id`` resumes: at most the
target in flight is seen twice, and its release carries a deterministic request id that the
FIFO queue deduplicates. A target is done only on a terminal result; a failed one is retried on
a later invocation until it has used ``max_attempts``, then it ends ``failed``.

A real run claims its parents (one unfinished real run per parent) before it acts, and every
invocation re-checks its checkpoint against the payload and the upstream before anything is
enqueued (:mod:`.sweep_model` holds the values and the rules of a sound checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import ValidationError

from .allocation import release_surplus
from .classify import is_rate_limited
from .errors import (
    AllocationError,
    RateLimitedError,
    UpstreamError,
    UpstreamUnavailableError,
    error_code_of,
)
from .model import DEFAULT_BLOCKS, Blocks, Totals, WorkspaceStatus
from .ports import AllocationObserver, Clock, NullObserver, Sleeper, WorkspaceGateway
from .sweep_claims import claim_parents, release_parents
from .sweep_model import (
    MAX_FAILED_LISTED,
    CheckpointCorruptError,
    CheckpointStore,
    FailedTarget,
    ParentHeldError,
    RunInProgressError,
    StaleCheckpointError,
    StoredCheckpoint,
    SweepAbandonRequest,
    SweepAbandonResult,
    SweepCheckpoint,
    SweepCountName,
    SweepCounts,
    SweepItem,
    SweepRefusedError,
    SweepRequest,
    SweepResult,
    TargetFailure,
    checkpoint_name,
    parse_checkpoint,
    payload_sha256,
)
from .transfer import TransferContext
from .validation import describe_validation_error

__all__ = [
    "CheckpointCorruptError",
    "CheckpointStore",
    "ParentHeldError",
    "ReleaseEnqueuer",
    "RunInProgressError",
    "StaleCheckpointError",
    "StoredCheckpoint",
    "SweepAbandonRequest",
    "SweepAbandonResult",
    "SweepCheckpoint",
    "SweepCounts",
    "SweepEnvironment",
    "SweepItem",
    "SweepRefusedError",
    "SweepRequest",
    "SweepResult",
    "abandon_sweep_run",
    "expected_error_code",
    "release_request_id",
    "run_sweep_batch",
]

MAX_LEASE_S = 900.0 + 60.0
"""The furthest a sound lease can lie ahead: Lambda's longest invocation plus a margin for
clock skew between invocations. A lease further ahead is corrupt, not a lock forever."""

MAX_BACKOFF_S = 30.0
"""Ceiling on one 429 backoff pause that the answer did not set with ``Retry-After``."""


class ReleaseEnqueuer(Protocol):
    """Puts a release request on the child's FIFO group."""

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: Literal["service", "sweep", "reclaim"] = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        """Enqueue one release; return its request id."""
        ...


@dataclass(frozen=True)
class SweepEnvironment:
    """The sweep's collaborators and limits for one invocation."""

    gateway: WorkspaceGateway
    store: CheckpointStore
    enqueuer: ReleaseEnqueuer
    clock: Clock
    """Monotonic seconds, for the invocation's own deadline."""
    wall_clock: Clock
    """Epoch seconds, for leases shared between invocations."""
    sleep: Sleeper
    deadline: float
    """Monotonic time by which this invocation must have stopped starting targets."""
    invocation_id: str
    lease_until: float
    """Epoch seconds at which this invocation is certainly over (its Lambda deadline)."""
    dynamic_allocation: bool
    blocks: Blocks = DEFAULT_BLOCKS
    target_budget_s: float = 20.0
    max_lease_s: float = MAX_LEASE_S
    observer: AllocationObserver = field(default_factory=NullObserver)
    on_item: Callable[[SweepItem], None] | None = None


def release_request_id(run_id: str, workspace_id: str) -> str:
    """The deterministic id of a sweep release: a resumed run re-enqueues the same id."""
    return f"{run_id}.{workspace_id}"


# ---------------------------------------------------------------- one batch


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
    """
    if not request.dry_run and not env.dynamic_allocation and not request.allow_when_disabled:
        # Children lowered while just-in-time allocation is off could not be topped back up.
        raise SweepRefusedError(
            "a real sweep refuses to start while SERENITY_DYNAMIC_ALLOCATION is off; "
            "set allow_when_disabled to override"
        )
    state = _open_run(request, run_id, env)
    checkpoint = state.checkpoint
    items: list[SweepItem] = []
    if checkpoint.state == "open":
        items = _process_batch(request, run_id, env, state)
    if checkpoint.state == "open" and len(checkpoint.processed) == len(checkpoint.targets):
        checkpoint.state = "done"  # also a run with no target at all
    done = checkpoint.state == "done"
    checkpoint.lease_owner, checkpoint.lease_until = None, None
    state.save()
    if done and not checkpoint.dry_run:
        release_parents(env.store, run_id, checkpoint.parent_workspace_ids)
    return _result(run_id, checkpoint, items, env.store.location(state.name))


def _process_batch(
    request: SweepRequest, run_id: str, env: SweepEnvironment, state: _RunState
) -> list[SweepItem]:
    checkpoint = state.checkpoint
    floor = request.floor or env.blocks.as_totals()
    items: list[SweepItem] = []
    done_ids = set(checkpoint.processed)  # once, not per target: a fleet run has thousands
    # Fresh targets first, retries after (stable): a failing child does not starve the rest.
    pending = sorted(
        (t for t in checkpoint.targets if t[0] not in done_ids), key=lambda t: _attempts(t, state)
    )
    for index, (child_id, parent_id) in enumerate(pending[: request.batch_size]):
        pause_s = request.rate_limit_ms / 1000.0 if index else 0.0
        if env.clock() + pause_s + env.target_budget_s > env.deadline:
            # Leave the rest for the next invocation rather than be cut mid-target; the pause
            # counts too (up to 60 s), or a long one would start a target it cannot finish.
            break
        if pause_s:
            env.sleep(pause_s)
        item = _sweep_one(request, run_id, child_id, parent_id, floor, env, state)
        items.append(item)
        if env.on_item is not None:
            env.on_item(item)
        _note_progress(request, checkpoint, item)
        state.save()
        if checkpoint.aborted:
            break
    return items


def _note_progress(request: SweepRequest, checkpoint: SweepCheckpoint, item: SweepItem) -> None:
    """Abort after too many failed attempts in a row; done once every target is terminal."""
    if checkpoint.error_streak >= request.max_consecutive_errors:
        checkpoint.aborted = (
            f"{checkpoint.error_streak} consecutive failed attempts "
            f"(last: {item.error_code or 'unknown'})"
        )
    if len(checkpoint.processed) == len(checkpoint.targets):
        checkpoint.state = "done"  # every target has a terminal result


def _attempts(target: tuple[str, str], state: _RunState) -> int:
    failure = state.checkpoint.failures.get(target[0])
    return 0 if failure is None else failure.attempts


def _result(
    run_id: str, checkpoint: SweepCheckpoint, items: list[SweepItem], location: str
) -> SweepResult:
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


class _RunState:
    """The checkpoint plus its version tag; every save is conditional on the last one."""

    def __init__(
        self, env: SweepEnvironment, name: str, checkpoint: SweepCheckpoint, etag: str
    ) -> None:
        self._env = env
        self.name = name
        self.checkpoint = checkpoint
        self._etag = etag

    def save(self) -> None:
        try:
            self._etag = self._env.store.save(
                self.name, self.checkpoint.model_dump(mode="json"), expected_etag=self._etag
            )
        except StaleCheckpointError as exc:
            raise RunInProgressError(self.checkpoint.run_id) from exc


# ---------------------------------------------------------------- opening a run


def _open_run(request: SweepRequest, run_id: str, env: SweepEnvironment) -> _RunState:
    """Load or start the run, check it is sound and this payload's, and take its lease."""
    name = checkpoint_name(run_id, request.dry_run)
    stored = env.store.load(name)
    # Every refusal comes before the first upstream call.
    if stored is None:
        _refuse_other_kind(request, run_id, env)
        if not request.dry_run:
            # Read-only first: a refused concurrent run writes nothing.
            claim_parents(env.store, run_id, request.parent_workspace_ids, check_only=True)
        checkpoint = _new_checkpoint(request, run_id, _families(request, env))
        expected: str | None = None
    else:
        checkpoint = _resumed_checkpoint(request, run_id, name, stored, env)
        if checkpoint.state == "open":
            _verify_targets(checkpoint, _families(request, env), name, request.limit)
        expected = stored.etag
    # Capped, so this invocation never writes a lease the next reader would call corrupt.
    lease_until = min(env.lease_until, env.wall_clock() + env.max_lease_s)
    checkpoint.lease_owner, checkpoint.lease_until = env.invocation_id, lease_until
    try:
        etag = env.store.save(name, checkpoint.model_dump(mode="json"), expected_etag=expected)
    except StaleCheckpointError as exc:
        raise RunInProgressError(run_id) from exc
    state = _RunState(env, name, checkpoint, etag)
    if not request.dry_run and checkpoint.state == "open":
        try:
            claim_parents(env.store, run_id, checkpoint.parent_workspace_ids)
        except ParentHeldError:
            checkpoint.lease_owner, checkpoint.lease_until = None, None
            state.save()
            raise
    return state


def _refuse_other_kind(request: SweepRequest, run_id: str, env: SweepEnvironment) -> None:
    if env.store.load(checkpoint_name(run_id, not request.dry_run)) is not None:
        kind = "real" if request.dry_run else "dry"
        raise SweepRefusedError(
            f"run {run_id!r} is a {kind} run; start a new run_id to change dry_run"
        )


def _new_checkpoint(
    request: SweepRequest, run_id: str, families: dict[str, list[str]]
) -> SweepCheckpoint:
    try:
        return SweepCheckpoint(
            run_id=run_id,
            dry_run=request.dry_run,
            parent_workspace_ids=list(request.parent_workspace_ids),
            workspace_ids=None if request.workspace_ids is None else list(request.workspace_ids),
            payload_sha256=payload_sha256(request),
            targets=_list_targets(request, families),
        )
    except ValidationError as exc:
        # Only the upstream's listing can break it (the payload was validated at the edge).
        raise SweepRefusedError(
            f"the upstream listed children the sweep cannot take: {describe_validation_error(exc)}"
        ) from None


def _resumed_checkpoint(
    request: SweepRequest,
    run_id: str,
    name: str,
    stored: StoredCheckpoint,
    env: SweepEnvironment,
) -> SweepCheckpoint:
    checkpoint = parse_checkpoint(stored.body, name)
    if checkpoint.run_id != run_id or checkpoint.dry_run != request.dry_run:
        # Only a copy (or an edit) puts another run's checkpoint under this name.
        raise CheckpointCorruptError(name, "it belongs to another run")
    now = env.wall_clock()
    lease = checkpoint.lease_until
    if lease is not None and lease > now + env.max_lease_s:
        raise CheckpointCorruptError(name, "its lease lies beyond any invocation's deadline")
    if not _is_same_payload(checkpoint, request):
        raise SweepRefusedError(
            f"run {run_id!r} was started with another payload (parents, workspace_ids, limit "
            "or floor differ); resume it with its own payload or start a new run_id"
        )
    if checkpoint.state == "abandoned":
        raise SweepRefusedError(f"run {run_id!r} was abandoned; start a new run_id")
    if lease is not None and lease > now and checkpoint.lease_owner != env.invocation_id:
        raise RunInProgressError(run_id)
    checkpoint.aborted = None  # resuming an aborted run is the operator's decision
    checkpoint.error_streak = 0
    return checkpoint


def _is_same_payload(checkpoint: SweepCheckpoint, request: SweepRequest) -> bool:
    return (
        checkpoint.parent_workspace_ids == list(request.parent_workspace_ids)
        and checkpoint.workspace_ids == request.workspace_ids
        and checkpoint.payload_sha256 == payload_sha256(request)
    )


def _families(request: SweepRequest, env: SweepEnvironment) -> dict[str, list[str]]:
    """The direct children of each listed parent, in listing order, as the upstream says now."""
    return {
        parent_id: [r.id for r in env.gateway.list_family(parent_id) if r.parent_id == parent_id]
        for parent_id in dict.fromkeys(request.parent_workspace_ids)
    }


def _list_targets(request: SweepRequest, families: dict[str, list[str]]) -> list[tuple[str, str]]:
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


def _verify_targets(
    checkpoint: SweepCheckpoint, families: dict[str, list[str]], name: str, limit: int | None
) -> None:
    """Every target still to act on is a child of its parent, re-read from the upstream."""
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


# ---------------------------------------------------------------- abandoning a run


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
    lease = checkpoint.lease_until
    if lease is not None and env.wall_clock() < lease <= env.wall_clock() + env.max_lease_s:
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


# ---------------------------------------------------------------- one target


@dataclass(frozen=True)
class _Failure:
    error_code: str
    counts_toward_abort: bool


def _sweep_one(
    request: SweepRequest,
    run_id: str,
    child_id: str,
    parent_id: str,
    floor: Totals,
    env: SweepEnvironment,
    state: _RunState,
) -> SweepItem:
    if not parent_id:
        _finish(state, child_id, "not_a_child")
        return SweepItem(workspace_id=child_id, outcome="not-a-child")
    item = SweepItem(workspace_id=child_id, parent_workspace_id=parent_id, outcome="")
    try:
        item, count = _with_backoff(request, run_id, child_id, floor, env, item)
    except Exception as exc:
        return _record_failure(request, state, item, _classify(exc))
    _finish(state, child_id, count)
    state.checkpoint.error_streak = 0
    return item


def _finish(state: _RunState, child_id: str, count: SweepCountName) -> None:
    state.checkpoint.counts.add(count)
    state.checkpoint.processed.append(child_id)


def _record_failure(
    request: SweepRequest, state: _RunState, item: SweepItem, failure: _Failure
) -> SweepItem:
    checkpoint = state.checkpoint
    child_id = item.workspace_id
    previous = checkpoint.failures.get(child_id)
    attempts = 1 if previous is None else previous.attempts + 1
    final = attempts >= request.max_attempts
    checkpoint.failures[child_id] = TargetFailure(
        attempts=attempts, error_code=failure.error_code, final=final
    )
    checkpoint.counts.add("failed_attempts")
    if failure.counts_toward_abort:
        checkpoint.error_streak += 1
    else:
        checkpoint.error_streak = 0
    kind: SweepCountName = "unexpected_errors" if failure.counts_toward_abort else "expected_errors"
    if final:
        _finish(state, child_id, kind)
    return item.model_copy(
        update={
            "outcome": kind.replace("_errors", "-error"),
            "error_code": failure.error_code,
            "attempt": attempts,
            "final": final,
        }
    )


def _with_backoff(
    request: SweepRequest,
    run_id: str,
    child_id: str,
    floor: Totals,
    env: SweepEnvironment,
    item: SweepItem,
) -> tuple[SweepItem, SweepCountName]:
    """One attempt on a target; 429s back off (``Retry-After`` first) within their budget."""
    waited = 0.0
    retry = 0
    while True:
        try:
            return _preview_and_act(request, run_id, child_id, floor, env, item)
        except (UpstreamError, RateLimitedError) as exc:
            if not _is_rate_limited(exc):
                raise
            delay = _backoff_delay(exc, request, retry)
            fits = env.clock() + delay + env.target_budget_s <= env.deadline
            if waited + delay > request.rate_limit_backoff_s or not fits:
                raise  # the budget is spent: this attempt fails and counts toward the abort
            env.sleep(delay)
            waited += delay
            retry += 1


def _is_rate_limited(exc: Exception) -> bool:
    if isinstance(exc, RateLimitedError):
        return True
    return isinstance(exc, UpstreamError) and is_rate_limited(exc.status, exc.body)


def _backoff_delay(exc: Exception, request: SweepRequest, retry: int) -> float:
    retry_after = getattr(exc, "retry_after_s", None)
    if isinstance(retry_after, (int, float)) and retry_after >= 0:
        return float(retry_after)
    base = max(1.0, request.rate_limit_ms / 1000.0)
    return float(min(base * 2**retry, MAX_BACKOFF_S))


def _preview_and_act(
    request: SweepRequest,
    run_id: str,
    child_id: str,
    floor: Totals,
    env: SweepEnvironment,
    item: SweepItem,
) -> tuple[SweepItem, SweepCountName]:
    status = env.gateway.read_status(child_id)
    if status != WorkspaceStatus.CREATED:
        # Zombies and settling children are left alone: a release would only race them.
        return item.model_copy(
            update={"outcome": "skipped-not-created", "error_code": status}
        ), "skipped_not_created"
    preview = release_surplus(
        env.gateway,
        child_id,
        TransferContext(
            clock=env.clock,
            sleep=env.sleep,
            deadline=env.deadline,
            observer=env.observer if request.dry_run else NullObserver(),
        ),
        floor=floor,
        blocks=env.blocks,
        dry_run=True,
    )
    plan = preview.plan
    assert plan is not None  # a dry run always carries its plan
    item = item.model_copy(
        update={"before": plan.before, "target": plan.target, "units_returned": plan.units_returned}
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


def _classify(exc: Exception) -> _Failure:
    if _is_rate_limited(exc):
        # Past its backoff budget a rate-limited target is the degraded gateway the abort is for.
        return _Failure("rateLimited", counts_toward_abort=True)
    code = expected_error_code(exc)
    if code is None:
        # No typed code: a degraded gateway or a bug. These abort a run.
        return _Failure(error_code_of(exc), counts_toward_abort=True)
    return _Failure(code, counts_toward_abort=False)


def expected_error_code(exc: Exception) -> str | None:
    """The typed code of an expected failure, or None for an unexpected one."""
    if isinstance(exc, UpstreamUnavailableError):
        # Coded, but a gateway that does not answer is the degraded gateway the abort exists
        # for: counted as expected, an unreachable upstream would walk the whole fleet.
        return None
    if isinstance(exc, AllocationError):
        return exc.code
    return None
