"""Ensure headroom before a write: block math, the ceiling, the tight-pool fallback.

The other use case, releasing surplus after deletes, is :mod:`.release`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .ceiling import Ceiling, cap_to_ceiling
from .errors import (
    BrandAiLimitError,
    OrgPoolExhaustedError,
    WiringError,
    WorkspaceBusyError,
)
from .model import DEFAULT_BLOCKS, AiResources, Blocks, Dimension, Totals, round_up_to_block
from .observations import HeadroomChecked, PoolChecked, Rejected, TightPoolFallback
from .parent_links import ParentMismatchError
from .ports import WorkspaceGateway
from .tiered import is_flat_pair, note_tiered, refuse_tiered_prompts
from .transfer import TransferContext, TransferPolicy, apply_transfer

EnsureOutcome = Literal["hot-path", "topped-up", "unmetered"]


class FrozenResult(BaseModel):
    """A frozen result value: what a use case did."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class EnsureResult(FrozenResult):
    """What one ensure did: its outcome, the totals before and after, and the attempts made."""

    outcome: EnsureOutcome
    before: Totals
    after: Totals
    attempts: int = 0
    used_exact_fallback: bool = False

    @property
    def topped_up(self) -> bool:
        """True when a transfer raised the child's totals."""
        return self.outcome == "topped-up"


def require_ids(**ids: str) -> None:
    """Refuse a blank id before any call (``WiringError`` naming it)."""
    for name, value in ids.items():
        if not value or not value.strip():
            raise WiringError(f"{name} must be a non-blank workspace id")


def required_totals(child: AiResources, need: Totals, include_drafted: bool) -> Totals:
    """Units the child must hold for ``need`` more: used (+ drafted prompts when asked) + need."""
    prompts = child.prompts.used + need.prompts
    if include_drafted:
        prompts += child.prompts.drafted
    return Totals(projects=max(0, child.projects.used + need.projects), prompts=max(0, prompts))


def plan_top_up(child: AiResources, required: Totals, blocks: Blocks) -> Totals:
    """New totals: a short dimension rises to ``required`` rounded up to its block; others keep."""
    current = child.totals()
    return Totals(
        **{
            dim.value: (
                round_up_to_block(required.get(dim), blocks.get(dim))
                if required.get(dim) > child.get(dim).total
                else current.get(dim)
            )
            for dim in Dimension
        }
    )


def _no_announcement(before: Totals, target: Totals) -> None:
    """No one to tell before a transfer (pure callers)."""


def ensure_headroom(
    gateway: WorkspaceGateway,
    child_id: str,
    parent_id: str,
    need: Totals | None,
    ctx: TransferContext,
    *,
    ceiling: Ceiling | None = None,
    blocks: Blocks = DEFAULT_BLOCKS,
    include_drafted: bool = False,
    policy: TransferPolicy,
    is_unmetered: Callable[[str], bool] | None = None,
    exact_fallback: bool = False,
    is_parent_of: Callable[[str, str], bool] | None = None,
    before_transfer: Callable[[Totals, Totals], None] = _no_announcement,
) -> EnsureResult:
    """Make sure the child can take ``need`` more units, topping it up from the pool if short.

    The hot path (nothing short) costs exactly one read. A top-up reads the parent's pool as an
    ADVISORY check (reported, never blocking: the transfer's 422 is the only authoritative
    exhaustion signal), then sends both dimensions in one absolute transfer.

    Args:
        ceiling: the per-brand cap in force (message and backstop combined); a block-rounded
            target above it is capped, only an exact need above it is refused.
        is_unmetered: when given and true for the parent, a needed top-up is skipped (the
            parent does not meter AI writes, so carving could only fail requests).
        is_parent_of: when given, a needed top-up first checks ``parent_id`` is the child's
            real parent (the hot path trusts nothing and moves nothing, so it skips this).
        exact_fallback: on pool exhaustion, retry once with the exact required totals (no
            block rounding) before rejecting.
        before_transfer: sees (totals before, target) just before each transfer is sent (the
            worker records the top-up's intent there); whatever it raises propagates and
            nothing is transferred.

    Raises:
        WiringError: a blank id, before any call.
        ParentMismatchError: the parent is not the child's parent (no transfer).
        BrandAiLimitError: the exact need would pass the ceiling (no transfer).
        TieredPromptsError: a prompts top-up on a tiered child or from a tiered pool (no
            transfer; terminal). A projects-only top-up there sends projects only.
        OrgPoolExhaustedError, WorkspaceBusyError, and the transfer's other errors.
    """
    require_ids(child_id=child_id, parent_id=parent_id)
    need = need or Totals()
    child = gateway.read_resources(child_id)
    before = child.totals()
    required = required_totals(child, need, include_drafted)
    # On a tiered child the prompts view is its tightest tier: a need that fits it fits both.
    new_totals = plan_top_up(child, required, blocks)
    note_tiered(child, "child", ctx)
    if new_totals == before:
        ctx.observer.record(HeadroomChecked("hot-path"))
        return EnsureResult(outcome="hot-path", before=before, after=before)

    # Before anything that trusts the parent (the unmetered shortcut, the pool, a transfer,
    # a reclaim): a parent that is not the child's real one makes the message invalid.
    if is_parent_of is not None and not is_parent_of(parent_id, child_id):
        raise ParentMismatchError()

    if is_unmetered is not None and is_unmetered(parent_id):
        ctx.observer.record(HeadroomChecked("unmetered"))
        return EnsureResult(outcome="unmetered", before=before, after=before)

    refuse_tiered_prompts(child, before, new_totals, ctx)
    try:
        new_totals = cap_to_ceiling(before, required, new_totals, ceiling)
    except BrandAiLimitError:
        ctx.observer.record(Rejected(BrandAiLimitError.code))
        raise
    return _top_up(
        gateway,
        (child_id, parent_id),
        child,
        (required, new_totals),
        policy,
        ctx,
        exact_fallback=exact_fallback,
        before_transfer=before_transfer,
    )


def _top_up(
    gateway: WorkspaceGateway,
    ids: tuple[str, str],
    child: AiResources,
    sizes: tuple[Totals, Totals],
    policy: TransferPolicy,
    ctx: TransferContext,
    *,
    exact_fallback: bool,
    before_transfer: Callable[[Totals, Totals], None],
) -> EnsureResult:
    """Read the pool and transfer ``planned`` (``sizes`` is required, planned) to the child."""
    child_id, parent_id = ids
    required, planned = sizes
    before = child.totals()
    pool = gateway.read_resources(parent_id)
    note_tiered(pool, "pool", ctx)
    ctx.observer.record(PoolChecked(parent_id, pool))
    # A prompts raise would come out of a tiered pool: the same unknown as a tiered child.
    refuse_tiered_prompts(pool, before, planned, ctx)
    with_prompts = is_flat_pair(child, pool)

    # Counted when attempted, not when it succeeds: the hot-path ratio must show the top-ups
    # a dry pool refuses.
    ctx.observer.record(HeadroomChecked("topped-up"))
    try:
        before_transfer(before, planned)
        attempts = _transfer_recording_rejections(
            gateway, child_id, planned, policy, ctx, with_prompts
        )
    except OrgPoolExhaustedError:
        exact = _exact_totals(before, required)
        if not exact_fallback or exact == planned:
            ctx.observer.record(Rejected(OrgPoolExhaustedError.code))
            raise
        attempts = _exact_fallback(
            gateway, child_id, pool, (before, exact), policy, ctx, before_transfer, with_prompts
        )
        return EnsureResult(
            outcome="topped-up",
            before=before,
            after=exact,
            attempts=attempts,
            used_exact_fallback=True,
        )
    return EnsureResult(outcome="topped-up", before=before, after=planned, attempts=attempts)


def _exact_fallback(
    gateway: WorkspaceGateway,
    child_id: str,
    pool: AiResources,
    change: tuple[Totals, Totals],
    policy: TransferPolicy,
    ctx: TransferContext,
    announce: Callable[[Totals, Totals], None],
    with_prompts: bool,
) -> int:
    """Retry a refused block-rounded top-up once with the exact totals; re-raise if refused."""
    before, exact = change
    try:
        if not _fits(pool, before, exact):
            # The pool read moments ago cannot cover even the exact raise: skip a transfer
            # that is all but sure to be refused (the read never blocks the first attempt).
            raise OrgPoolExhaustedError()
        announce(before, exact)
        attempts = _transfer_recording_rejections(
            gateway, child_id, exact, policy, ctx, with_prompts
        )
    except OrgPoolExhaustedError:
        ctx.observer.record(TightPoolFallback("rejected"))
        ctx.observer.record(Rejected(OrgPoolExhaustedError.code))
        raise
    ctx.observer.record(TightPoolFallback("saved"))
    return attempts


def _fits(pool: AiResources, before: Totals, target: Totals) -> bool:
    return all(target.get(dim) - before.get(dim) <= pool.get(dim).free for dim in Dimension)


def _exact_totals(before: Totals, required: Totals) -> Totals:
    return Totals(**{dim.value: max(before.get(dim), required.get(dim)) for dim in Dimension})


def _transfer_recording_rejections(
    gateway: WorkspaceGateway,
    child_id: str,
    totals: Totals,
    policy: TransferPolicy,
    ctx: TransferContext,
    with_prompts: bool,
) -> int:
    try:
        return apply_transfer(gateway, child_id, totals, policy, ctx, include_prompts=with_prompts)
    except WorkspaceBusyError:
        ctx.observer.record(Rejected(WorkspaceBusyError.code))
        raise
