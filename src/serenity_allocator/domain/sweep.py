"""The rightsizing sweep: preview every child of the listed pools, enqueue the releases.

The sweep never transfers. Each target gets a read-only :func:`release_surplus` preview (the
single source of truth for the release math); a real run enqueues a release message into the
child's own FIFO group, so the release is serialized with every ensure on that child and the
worker re-reads and recomputes when it applies it.

Progress lives in a checkpoint written after every target with a conditional write, so an
invocation can stop anywhere (timeout, crash) and the same ``run_id`` resumes: at most the
target in flight is seen twice, and its release carries a deterministic request id that the
FIFO queue deduplicates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from .allocation import release_surplus
from .classify import is_rate_limited
from .errors import AllocationError, UpstreamError, UpstreamUnavailableError
from .model import DEFAULT_BLOCKS, Blocks, Totals, WorkspaceStatus
from .ports import AllocationObserver, Clock, NullObserver, Sleeper, WorkspaceGateway
from .transfer import TransferContext

WorkspaceId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
RunId = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^[A-Za-z0-9._-]{1,64}$")]


class SweepRequest(BaseModel):
    """The Sweep Lambda's payload. Unknown keys and non-numeric or negative numbers are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    dry_run: bool = True
    """Default true: a payload that forgets the flag previews instead of changing anything."""
    parent_workspace_ids: list[WorkspaceId] = Field(min_length=1, max_length=100)
    workspace_ids: list[WorkspaceId] | None = None
    limit: int | None = Field(default=None, ge=1)
    rate_limit_ms: int = Field(default=300, ge=0, le=60_000)
    max_consecutive_errors: int = Field(default=5, ge=1, le=1000)
    batch_size: int = Field(default=25, ge=1, le=10_000)
    run_id: RunId | None = None
    floor: Totals | None = None
    allow_when_disabled: bool = False

    @field_validator("workspace_ids")
    @classmethod
    def _non_empty_when_given(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("must name at least one workspace when given")
        return value


SweepCountName = Literal[
    "would_release",
    "enqueued",
    "nothing_to_release",
    "requires_decommission",
    "skipped_not_created",
    "not_a_child",
    "expected_errors",
    "unexpected_errors",
]


class SweepCounts(BaseModel):
    """Running totals of a run, kept in its checkpoint."""

    model_config = ConfigDict(extra="forbid")

    would_release: int = 0
    enqueued: int = 0
    nothing_to_release: int = 0
    requires_decommission: int = 0
    skipped_not_created: int = 0
    not_a_child: int = 0
    expected_errors: int = 0
    unexpected_errors: int = 0

    def add(self, name: SweepCountName) -> None:
        """Count one more of ``name``."""
        setattr(self, name, getattr(self, name) + 1)


class SweepItem(BaseModel):
    """One per-child line of the report."""

    model_config = ConfigDict(extra="forbid")

    workspace_id: str
    parent_workspace_id: str | None = None
    outcome: str
    before: Totals | None = None
    target: Totals | None = None
    units_returned: Totals | None = None
    error_code: str | None = None
    request_id: str | None = None


class SweepCheckpoint(BaseModel):
    """What survives between invocations of one run."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    dry_run: bool
    targets: list[tuple[str, str]]
    """(child id, parent id) in processing order, fixed when the run starts."""
    processed: list[str] = Field(default_factory=list)
    counts: SweepCounts = Field(default_factory=SweepCounts)
    error_streak: int = 0
    aborted: str | None = None
    lease_owner: str | None = None
    lease_until: float | None = None
    """Epoch seconds; an invocation holds its run until its own deadline at most."""


class SweepResult(BaseModel):
    """What one invocation returns (and the state machine loops on)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    dry_run: bool
    done: bool
    aborted: bool
    abort_reason: str | None = None
    processed: int
    remaining: int
    total: int
    counts: SweepCounts
    items: list[SweepItem]
    checkpoint: str


class SweepRefusedError(Exception):
    """The sweep will not start (kill switch off, run mismatch); the message says why."""


class RunInProgressError(SweepRefusedError):
    """Another invocation holds this run (or wrote its checkpoint first)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} already in progress in another invocation")


class CheckpointConflictError(Exception):
    """A conditional checkpoint write lost: somebody else wrote the checkpoint first."""


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint body with the version tag its next conditional write must match."""

    body: dict[str, Any]
    etag: str


class CheckpointStore(Protocol):
    """Where checkpoints live; ``save`` is conditional on the version last read."""

    def load(self, run_id: str) -> StoredCheckpoint | None:
        """Read the run's checkpoint, or None when the run is new."""
        ...

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        """Write if unchanged since ``expected_etag`` (None: only if absent); return the tag.

        Raises CheckpointConflictError when the condition fails.
        """
        ...

    def location(self, run_id: str) -> str:
        """Where the checkpoint is, for the report (e.g. ``s3://bucket/key``)."""
        ...


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
    observer: AllocationObserver = field(default_factory=NullObserver)
    on_item: Callable[[SweepItem], None] | None = None


def release_request_id(run_id: str, workspace_id: str) -> str:
    """The deterministic id of a sweep release: a resumed run re-enqueues the same id."""
    return f"{run_id}.{workspace_id}"


def run_sweep_batch(request: SweepRequest, run_id: str, env: SweepEnvironment) -> SweepResult:
    """Process the next batch of the run ``run_id``; resumable, at most one target in flight.

    Raises:
        SweepRefusedError: a real run while the kill switch is off (unless allowed), or a
            run id reused across a dry and a real run.
        RunInProgressError: another invocation holds the run.
    """
    if not request.dry_run and not env.dynamic_allocation and not request.allow_when_disabled:
        # Children lowered while just-in-time allocation is off could not be topped back up.
        raise SweepRefusedError(
            "a real sweep refuses to start while SERENITY_DYNAMIC_ALLOCATION is off; "
            "set allow_when_disabled to override"
        )
    stored = env.store.load(run_id)
    checkpoint, etag = _open_run(request, run_id, stored, env)
    state = _RunState(env, run_id, checkpoint, etag)
    floor = request.floor or env.blocks.as_totals()
    items: list[SweepItem] = []

    done_ids = set(checkpoint.processed)  # once, not per target: a fleet run has thousands
    pending = [t for t in checkpoint.targets if t[0] not in done_ids]
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
        checkpoint.processed.append(child_id)
        if checkpoint.error_streak >= request.max_consecutive_errors:
            checkpoint.aborted = (
                f"{checkpoint.error_streak} consecutive unexpected errors "
                f"(last: {item.error_code or 'unknown'})"
            )
        state.save()
        if checkpoint.aborted:
            break

    done = not checkpoint.aborted and len(checkpoint.processed) >= len(checkpoint.targets)
    checkpoint.lease_owner, checkpoint.lease_until = None, None
    state.save()
    return SweepResult(
        run_id=run_id,
        dry_run=checkpoint.dry_run,
        done=done,
        aborted=checkpoint.aborted is not None,
        abort_reason=checkpoint.aborted,
        processed=len(checkpoint.processed),
        remaining=len(checkpoint.targets) - len(checkpoint.processed),
        total=len(checkpoint.targets),
        counts=checkpoint.counts,
        items=items,
        checkpoint=env.store.location(run_id),
    )


class _RunState:
    """The checkpoint plus its version tag; every save is conditional on the last one."""

    def __init__(
        self, env: SweepEnvironment, run_id: str, checkpoint: SweepCheckpoint, etag: str
    ) -> None:
        self._env = env
        self._run_id = run_id
        self.checkpoint = checkpoint
        self._etag = etag

    def save(self) -> None:
        try:
            self._etag = self._env.store.save(
                self._run_id, self.checkpoint.model_dump(mode="json"), expected_etag=self._etag
            )
        except CheckpointConflictError as exc:
            raise RunInProgressError(self._run_id) from exc


def _open_run(
    request: SweepRequest, run_id: str, stored: StoredCheckpoint | None, env: SweepEnvironment
) -> tuple[SweepCheckpoint, str]:
    """Load or start the run and take its lease with a conditional write."""
    now = env.wall_clock()
    if stored is None:
        checkpoint = SweepCheckpoint(
            run_id=run_id, dry_run=request.dry_run, targets=_list_targets(request, env)
        )
        expected: str | None = None
    else:
        checkpoint = SweepCheckpoint.model_validate(stored.body)
        if checkpoint.dry_run != request.dry_run:
            kind = "dry" if checkpoint.dry_run else "real"
            raise SweepRefusedError(
                f"run {run_id!r} is a {kind} run; start a new run_id to change dry_run"
            )
        lease_held = checkpoint.lease_until is not None and checkpoint.lease_until > now
        if lease_held and checkpoint.lease_owner != env.invocation_id:
            raise RunInProgressError(run_id)
        checkpoint.aborted = None  # resuming an aborted run is the operator's decision
        checkpoint.error_streak = 0
        expected = stored.etag
    checkpoint.lease_owner, checkpoint.lease_until = env.invocation_id, env.lease_until
    try:
        etag = env.store.save(run_id, checkpoint.model_dump(mode="json"), expected_etag=expected)
    except CheckpointConflictError as exc:
        raise RunInProgressError(run_id) from exc
    return checkpoint, etag


def _list_targets(request: SweepRequest, env: SweepEnvironment) -> list[tuple[str, str]]:
    """Direct children of each listed pool (parents excluded), narrowed and limited."""
    targets: list[tuple[str, str]] = []
    seen: set[str] = set()
    for parent_id in request.parent_workspace_ids:
        for record in env.gateway.list_family(parent_id):
            if record.parent_id == parent_id and record.id not in seen:
                seen.add(record.id)
                targets.append((record.id, parent_id))
    if request.workspace_ids is not None:
        wanted = list(dict.fromkeys(request.workspace_ids))
        by_id = dict(targets)
        # An id that is not a child of a listed parent is reported, not swept: keep it as a
        # target with no parent so it shows up in the report once.
        targets = [(w, by_id.get(w, "")) for w in wanted]
    if request.limit is not None:
        targets = targets[: request.limit]
    return targets


def _sweep_one(
    request: SweepRequest,
    run_id: str,
    child_id: str,
    parent_id: str,
    floor: Totals,
    env: SweepEnvironment,
    state: _RunState,
) -> SweepItem:
    counts = state.checkpoint.counts
    if not parent_id:
        counts.add("not_a_child")
        return SweepItem(workspace_id=child_id, outcome="not-a-child")
    item = SweepItem(workspace_id=child_id, parent_workspace_id=parent_id, outcome="")
    try:
        status = env.gateway.read_status(child_id)
        if status != WorkspaceStatus.CREATED:
            # Zombies and settling children are left alone: a release would only race them.
            counts.add("skipped_not_created")
            state.checkpoint.error_streak = 0
            return item.model_copy(update={"outcome": "skipped-not-created", "error_code": status})
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
            update={
                "before": plan.before,
                "target": plan.target,
                "units_returned": plan.units_returned,
            }
        )
        outcome = plan.natural_outcome
        if outcome == "released":
            if request.dry_run:
                counts.add("would_release")
                item = item.model_copy(update={"outcome": "would-release"})
            else:
                request_id = env.enqueuer.enqueue_release(
                    child_id,
                    floor=floor,
                    source="sweep",
                    run_id=run_id,
                    request_id=release_request_id(run_id, child_id),
                )
                counts.add("enqueued")
                item = item.model_copy(update={"outcome": "enqueued", "request_id": request_id})
        elif outcome == "requires-decommission":
            counts.add("requires_decommission")
            item = item.model_copy(update={"outcome": "requires-decommission"})
        else:
            counts.add("nothing_to_release")
            item = item.model_copy(update={"outcome": "nothing-to-release"})
        state.checkpoint.error_streak = 0
        return item
    except Exception as exc:
        code = expected_error_code(exc)
        if code is None:
            # No typed code: a degraded gateway or a bug. These, and only these, abort a run.
            counts.add("unexpected_errors")
            state.checkpoint.error_streak += 1
            return item.model_copy(
                update={"outcome": "unexpected-error", "error_code": _describe(exc)}
            )
        counts.add("expected_errors")
        state.checkpoint.error_streak = 0
        return item.model_copy(update={"outcome": "expected-error", "error_code": code})


def expected_error_code(exc: Exception) -> str | None:
    """The typed code of an expected failure, or None for an unexpected one."""
    if isinstance(exc, UpstreamUnavailableError):
        # Coded, but a gateway that does not answer is the degraded gateway the abort exists
        # for: counted as expected, an unreachable upstream would walk the whole fleet.
        return None
    if isinstance(exc, AllocationError):
        return exc.code
    if isinstance(exc, UpstreamError) and is_rate_limited(exc.status, exc.body):
        return "rateLimited"
    return None


def _describe(exc: Exception) -> str:
    if isinstance(exc, AllocationError):
        return exc.code
    if isinstance(exc, UpstreamError):
        return f"upstream{exc.status}"
    return type(exc).__name__
