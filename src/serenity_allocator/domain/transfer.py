"""Applying one absolute transfer under a policy (fail-fast or settle), and what it may carry.

Facts this rests on (semrush-user-manager.md): a transfer is an absolute, idempotent set, so a
retry of the same body is harmless; a transfer racing a settling child gets 422 ``workspace not
ready``, which is transient and can outlive the status reading ``created``.

What a transfer may carry ("The tiered prompt shape": daily + weekly tiers, no ``prompts``):
the transfer takes only a flat ``prompts`` number and nobody knows which tier it would move,
so the upstream never wrote to a tiered workspace. Here: a need every tier already covers is
served with no transfer; a need that would take a prompts transfer on a tiered child or pool
is refused at once, terminal (``tieredPrompts``); projects are untouched by the drift, so a
projects-only top-up or release still goes ahead, sending projects only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from .errors import (
    OrgPoolExhaustedError,
    OutOfTimeError,
    RateLimitedError,
    SettleTimeoutError,
    TieredPromptsError,
    UpstreamError,
    WorkspaceBusyError,
    is_not_ready,
    is_pool_exhausted,
    is_rate_limited,
)
from .model import AiResources, Totals, WorkspaceStatus
from .observations import NotReadyRetry, Rejected, TieredWorkspaceMet, TransferTimed
from .ports import AllocationObserver, Clock, NullObserver, Sleeper, WorkspaceGateway

CALL_BUDGET_S = 15.0
"""Time one upstream call may take: the Semrush client's per-request timeout
(``SEMRUSH_TIMEOUT_S``), reserved before each transfer attempt. The one place it is written."""


class TransferPolicy(BaseModel):
    """How hard one transfer tries before giving up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The policy's name, also the ``TopUpLatencyMs`` ``Path`` label: ``fail-fast`` (the
    request path) or ``settle`` (the release and sweep path)."""
    not_ready_retries: int = Field(ge=0)
    """Retries after the first attempt when the child answers ``workspace not ready``."""
    retry_interval_s: float = Field(ge=0)
    """Sleep before retry ``n`` is ``retry_interval_s * n``."""
    settle_poll_attempts: int = Field(ge=0)
    """Status polls after a successful transfer until ``created``; 0 never polls."""
    settle_poll_interval_s: float = Field(ge=0)
    attempt_budget_s: float = Field(default=CALL_BUDGET_S, ge=0)
    """Time one transfer call may take (the client's per-request timeout)."""


FAIL_FAST = TransferPolicy(
    name="fail-fast",
    not_ready_retries=0,
    retry_interval_s=0.0,
    settle_poll_attempts=0,
    settle_poll_interval_s=0.0,
)
"""Request path: exactly one attempt, never polls (the first allocator's rule)."""

SETTLE_POLL_ATTEMPTS = 30
SETTLE_POLL_INTERVAL_S = 1.0
# Settling can take longer than 15 s; the upstream polls 30 x 1 s (semrush-user-manager.md,
# "Child workspaces, and other read-side facts"): the first allocator's 12 polls were too few.

SETTLE = TransferPolicy(
    name="settle",
    not_ready_retries=3,
    retry_interval_s=1.0,
    settle_poll_attempts=SETTLE_POLL_ATTEMPTS,
    settle_poll_interval_s=SETTLE_POLL_INTERVAL_S,
)
"""Release path: 3 not-ready retries (4 transfers), interval x attempt, then up to 30 polls 1 s
apart (configurable: ``SETTLE_POLL_ATTEMPTS``, ``SETTLE_POLL_INTERVAL_S``), never past the
deadline."""


@dataclass(frozen=True)
class TransferContext:
    """What a transfer needs besides the gateway: time, sleep, deadline and an observer."""

    clock: Clock
    sleep: Sleeper
    deadline: float | None = None
    """Monotonic time by which every call must have finished; ``None`` is unbounded."""
    observer: AllocationObserver = field(default_factory=NullObserver)

    def has_time_for(self, seconds: float) -> bool:
        """True when ``seconds`` of work still fit before the deadline."""
        return self.deadline is None or self.clock() + seconds <= self.deadline


@dataclass(frozen=True)
class TransferTarget:
    """The absolute totals one workspace is set to by a transfer.

    ``include_prompts=False`` sends projects only (a tiered child or pool never gets a flat
    ``prompts``).
    """

    workspace_id: str
    totals: Totals
    include_prompts: bool = True


def apply_transfer(
    gateway: WorkspaceGateway,
    target: TransferTarget,
    policy: TransferPolicy,
    ctx: TransferContext,
) -> int:
    """Send one absolute transfer to ``target`` under ``policy``; return the attempts made.

    Raises:
        OrgPoolExhaustedError: 422 insufficient units (terminal; recorded by the caller).
        WorkspaceBusyError: still ``not ready`` after every allowed retry.
        SettleTimeoutError: accepted, but the status never returned to ``created``.
        OutOfTimeError: no room before the deadline for a (further) attempt.
        RateLimitedError: the client's own 429 retries were exhausted.
        UpstreamError: anything else, unchanged.
    """
    attempt = 0
    while True:
        attempt += 1
        if not ctx.has_time_for(policy.attempt_budget_s):
            raise OutOfTimeError()
        try:
            _timed_transfer(gateway, target, policy, ctx)
            break
        except UpstreamError as exc:
            if is_pool_exhausted(exc.status, exc.body):
                raise OrgPoolExhaustedError() from exc
            if is_rate_limited(exc.status, exc.body):
                raise RateLimitedError() from exc
            if not is_not_ready(exc.status, exc.body):
                raise
            backoff = policy.retry_interval_s * attempt
            if attempt > policy.not_ready_retries or not ctx.has_time_for(
                backoff + policy.attempt_budget_s
            ):
                raise WorkspaceBusyError() from exc
            ctx.observer.record(NotReadyRetry())
            ctx.sleep(backoff)
    _wait_until_created(gateway, target.workspace_id, policy, ctx)
    return attempt


def _timed_transfer(
    gateway: WorkspaceGateway, target: TransferTarget, policy: TransferPolicy, ctx: TransferContext
) -> None:
    # Every call is timed, refused ones too, and only the call: a latency that hid refusals or
    # included retry sleeps would flatter the path exactly when the pool runs dry.
    started = ctx.clock()
    try:
        if target.include_prompts:
            gateway.transfer(target.workspace_id, target.totals)
        else:
            # Only here: every flat-shape gateway keeps its two-argument call.
            gateway.transfer(target.workspace_id, target.totals, include_prompts=False)
    finally:
        ctx.observer.record(TransferTimed(policy.name, (ctx.clock() - started) * 1000.0))


def _wait_until_created(
    gateway: WorkspaceGateway, workspace_id: str, policy: TransferPolicy, ctx: TransferContext
) -> None:
    # The settle path waits for the child to leave the brief post-transfer window so the next
    # mutation does not race it; fail-fast never polls (policy.settle_poll_attempts == 0).
    for poll in range(policy.settle_poll_attempts):
        if gateway.read_status(workspace_id) == WorkspaceStatus.CREATED:
            return
        if poll + 1 == policy.settle_poll_attempts or not ctx.has_time_for(
            policy.settle_poll_interval_s
        ):
            break
        ctx.sleep(policy.settle_poll_interval_s)
    else:
        return
    raise SettleTimeoutError()


# A tiered workspace: what a transfer to or from it may carry.


def note_tiered(workspace: AiResources, role: str, ctx: TransferContext) -> None:
    """Count a request meeting a tiered workspace as its ``child`` or ``pool``."""
    if workspace.is_tiered:
        ctx.observer.record(TieredWorkspaceMet(role))


def refuse_tiered_prompts(
    workspace: AiResources, before: Totals, planned: Totals, ctx: TransferContext
) -> None:
    """Refuse (terminal) a plan that moves the prompts total of a tiered child or from a pool.

    Raises:
        TieredPromptsError: ``workspace`` is tiered and ``planned`` changes the prompts total.
    """
    if workspace.is_tiered and planned.prompts != before.prompts:
        ctx.observer.record(Rejected(TieredPromptsError.code))
        raise TieredPromptsError()


def is_flat_pair(*workspaces: AiResources) -> bool:
    """True when none of the workspaces is tiered, so a transfer may carry ``prompts``."""
    return not any(workspace.is_tiered for workspace in workspaces)
