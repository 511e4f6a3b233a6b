"""The sweep's values: its payloads, its checkpoint, its results and its errors.

A checkpoint is bound to its run: it records the run id, the parents, the allow-list, the
dry-run flag and a hash of the payload that started it, and it must be consistent with itself
(every processed child a target, every count non-negative and accounting for exactly the
processed targets). Whatever breaks that is :class:`CheckpointCorruptError`, raised before the
sweep acts on anything.

Dry runs and real runs never share a storage name (:func:`checkpoint_name`), and a real run
claims each of its parents under :func:`parent_claim_name` so one parent belongs to at most one
unfinished real run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args
from urllib.parse import quote

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from ..messages import WorkspaceId, describe_validation_error, not_a_dot_segment
from ..model import Totals
from .errors import CheckpointCorruptError

RunId = Annotated[
    str,
    StringConstraints(strip_whitespace=True, pattern=r"^[A-Za-z0-9._-]{1,64}$"),
    AfterValidator(not_a_dot_segment),
]
Count = Annotated[int, Field(ge=0)]

MAX_FAILED_LISTED = 500
"""Failed targets a result lists at most (the checkpoint keeps them all): a result is also a
Step Functions state, which must stay under 256 KB."""


# ---------------------------------------------------------------- payloads


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
    max_attempts: int = Field(default=3, ge=1, le=20)
    """Attempts per target before it ends ``failed`` (each resume retries what is left)."""
    rate_limit_backoff_s: int = Field(default=60, ge=0, le=600)
    """Seconds one target may spend backing off 429s before the attempt counts as failed."""
    run_id: RunId | None = None
    floor: Totals | None = None
    allow_when_disabled: bool = False

    @field_validator("workspace_ids")
    @classmethod
    def _non_empty_when_given(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("must name at least one workspace when given")
        return value


class SweepAbandonRequest(BaseModel):
    """The operator's explicit end of an unfinished run: ``{"abandon": true, "run_id": ...}``.

    The run's checkpoint is kept (marked abandoned, never resumable) and its parents are freed;
    an unreadable checkpoint is replaced by an abandoned marker (the bucket keeps the old one).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    abandon: Literal[True]
    run_id: RunId
    reason: str | None = Field(default=None, min_length=1, max_length=200)


class SweepParentAbandonRequest(BaseModel):
    """``{"abandon": true, "parent_workspace_id": ...}``: end whatever run holds a parent.

    Abandons the run the parent's claim names; a claim that cannot be read is cleared instead
    (overwritten as released; the bucket keeps the old one).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    abandon: Literal[True]
    parent_workspace_id: WorkspaceId
    reason: str | None = Field(default=None, min_length=1, max_length=200)


# What defines a run (its targets and what it does to them). Pacing knobs are left out: an
# operator may slow a rate-limited run down or give it more attempts when resuming it.
_BINDING_FIELDS = ("dry_run", "parent_workspace_ids", "workspace_ids", "limit", "floor")


def payload_sha256(request: SweepRequest) -> str:
    """The hash a checkpoint keeps of the payload that started its run (its defining fields)."""
    bound = request.model_dump(mode="json", include=set(_BINDING_FIELDS))
    canonical = json.dumps(bound, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- storage names


def checkpoint_name(run_id: str, dry_run: bool) -> str:
    """Where a run's checkpoint is stored: a dry run and a real run never share a name."""
    return f"dry/{run_id}" if dry_run else run_id


def parent_claim_name(parent_id: str) -> str:
    """Where the claim of a parent by a real run is stored."""
    return f"parents/{quote(parent_id, safe='')}"


# ---------------------------------------------------------------- checkpoint


SweepCountName = Literal[
    "would_release",
    "enqueued",
    "nothing_to_release",
    "requires_decommission",
    "skipped_not_created",
    "not_a_child",
    "access_denied",
    "expected_errors",
    "unexpected_errors",
]
TERMINAL_COUNTS: tuple[SweepCountName, ...] = get_args(SweepCountName)


class SweepCounts(BaseModel):
    """Running totals of a run, kept in its checkpoint.

    Each target counts once, under its terminal result (``expected_errors`` and
    ``unexpected_errors`` are targets that ended failed after their last attempt;
    ``access_denied`` are targets the operator's token may not reach: Semrush 401/403, final
    at once, never toward the abort unless every target so far was denied);
    ``failed_attempts`` counts every failed attempt, retried or not. ``tiered`` counts the
    targets in the tiered prompt shape besides their terminal result: their prompts are never
    released (no flat ``prompts`` to a tiered workspace), only their projects.
    """

    model_config = ConfigDict(extra="forbid")

    would_release: Count = 0
    enqueued: Count = 0
    nothing_to_release: Count = 0
    requires_decommission: Count = 0
    skipped_not_created: Count = 0
    not_a_child: Count = 0
    access_denied: Count = 0
    expected_errors: Count = 0
    unexpected_errors: Count = 0
    failed_attempts: Count = 0
    tiered: Count = 0

    def add(self, name: SweepCountName | Literal["failed_attempts", "tiered"]) -> None:
        """Count one more of ``name``."""
        setattr(self, name, getattr(self, name) + 1)

    def terminal_total(self) -> int:
        """Targets with a terminal result."""
        return sum(getattr(self, name) for name in TERMINAL_COUNTS)


class TargetFailure(BaseModel):
    """A target's failed attempts so far; ``final`` once it has no attempt left."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = Field(ge=1)
    error_code: str = Field(min_length=1, max_length=64)
    final: bool = False


RunState = Literal["open", "done", "abandoned"]


class SweepCheckpoint(BaseModel):
    """What survives between invocations of one run, bound to the payload that started it."""

    model_config = ConfigDict(extra="forbid")

    run_id: RunId
    dry_run: bool
    parent_workspace_ids: list[WorkspaceId] = Field(min_length=1)
    workspace_ids: list[WorkspaceId] | None = None
    payload_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    state: RunState = "open"
    abandon_reason: str | None = None
    targets: list[tuple[WorkspaceId, WorkspaceId | Literal[""]]]
    """(child id, parent id) in processing order, fixed when the run starts; parent "" for an
    allow-listed id that is not a child of a listed parent (reported, never swept)."""
    processed: list[str] = Field(default_factory=list)
    """Targets with a terminal result, in the order they got it."""
    failures: dict[str, TargetFailure] = Field(default_factory=dict)
    counts: SweepCounts = Field(default_factory=SweepCounts)
    error_streak: Count = 0
    aborted: str | None = None
    lease_owner: str | None = None
    lease_until: float | None = None
    """Epoch seconds; an invocation holds its run until its own deadline at most."""

    @model_validator(mode="after")
    def _consistent(self) -> SweepCheckpoint:
        children = [child for child, _ in self.targets]
        if len(set(children)) != len(children):
            raise ValueError("targets: a child is listed twice")
        known = set(children)
        if len(set(self.processed)) != len(self.processed) or not known.issuperset(self.processed):
            raise ValueError("processed: lists a child twice or a child that is not a target")
        if not known.issuperset(self.failures):
            raise ValueError("failures: names a child that is not a target")
        _check_parents(self)
        if self.counts.terminal_total() != len(self.processed):
            raise ValueError("counts: do not account for exactly the processed targets")
        return self


def _check_parents(checkpoint: SweepCheckpoint) -> None:
    parents = set(checkpoint.parent_workspace_ids)
    allowed = None if checkpoint.workspace_ids is None else set(checkpoint.workspace_ids)
    for child, parent in checkpoint.targets:
        if parent and parent not in parents:
            raise ValueError("targets: a parent that the run does not list")
        if allowed is not None and child not in allowed:
            raise ValueError("targets: a child outside the run's workspace_ids")
        if not parent and allowed is None:
            raise ValueError("targets: a parentless target without workspace_ids")


def parse_checkpoint(body: Mapping[str, Any], name: str) -> SweepCheckpoint:
    """Validate a stored checkpoint; every schema problem is named by its field.

    Raises:
        CheckpointCorruptError: The body breaks the schema or contradicts itself.
    """
    try:
        return SweepCheckpoint.model_validate(body)
    except ValidationError as exc:
        raise CheckpointCorruptError(name, describe_validation_error(exc)) from None


class AbandonedUnreadableCheckpoint(BaseModel):
    """What an abandon writes over a checkpoint it could not read (the bucket keeps the old one).

    A run with this marker is finished: never resumable, and its parents' claims free to take.
    """

    model_config = ConfigDict(extra="forbid")

    run_id: RunId
    state: Literal["abandoned"] = "abandoned"
    abandon_reason: str
    unreadable: str = Field(min_length=1)
    """Why the checkpoint it replaced could not be read."""


def is_abandoned_marker(body: object) -> bool:
    """True when ``body`` is an :class:`AbandonedUnreadableCheckpoint` (never a checkpoint)."""
    try:
        AbandonedUnreadableCheckpoint.model_validate(body)
    except ValidationError:
        return False
    return True


class ParentClaim(BaseModel):
    """Which real run a parent belongs to (``run_id`` None: released)."""

    model_config = ConfigDict(extra="forbid")

    parent_workspace_id: WorkspaceId
    run_id: RunId | None
    released_by: RunId | None = None


# ---------------------------------------------------------------- results


class SweepItem(BaseModel):
    """One per-child line of the report (one attempt on one target)."""

    model_config = ConfigDict(extra="forbid")

    workspace_id: str
    parent_workspace_id: str | None = None
    outcome: str
    before: Totals | None = None
    target: Totals | None = None
    units_returned: Totals | None = None
    error_code: str | None = None
    request_id: str | None = None
    tiered: Literal[True] | None = None
    """True for a child in the tiered prompt shape: its prompts were skipped."""
    attempt: int = 1
    final: bool = True
    """False for a failed attempt the run will retry."""


class FailedTarget(BaseModel):
    """A target that ended failed: which, why, after how many attempts."""

    model_config = ConfigDict(extra="forbid")

    workspace_id: str
    parent_workspace_id: str | None = None
    error_code: str
    attempts: int


class SweepResult(BaseModel):
    """What one invocation returns (and the state machine loops on).

    ``done`` means every target has a terminal result; ``failed`` lists those that ended failed.
    """

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
    failed: list[FailedTarget] = Field(default_factory=list)
    failed_listed_all: bool = True
    checkpoint: str


class SweepAbandonResult(BaseModel):
    """What an abandon returns."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None
    """None when an unreadable claim was cleared (its holder unknown)."""
    dry_run: bool
    abandoned: Literal[True] = True
    released_parents: list[str]
    processed: int | None = None
    """None when the checkpoint was unreadable (so are ``total``'s targets)."""
    total: int | None = None
    checkpoint: str
    """The checkpoint (or, for a cleared claim, the claim) that now says abandoned/released."""
    unreadable: str | None = None
    """What could not be read and was replaced (the old version stays in the bucket)."""


# ---------------------------------------------------------------- stored documents


@dataclass(frozen=True)
class StoredCheckpoint:
    """A stored document's body with the version tag its next conditional write must match."""

    body: dict[str, Any]
    etag: str
