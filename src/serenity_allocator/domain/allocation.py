"""The two use cases: ensure headroom before a write, release surplus after deletes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .ceiling import Ceiling, cap_to_ceiling
from .errors import (
    AllocationError,
    BrandAiLimitError,
    OrgPoolExhaustedError,
    WiringError,
    WorkspaceBusyError,
)
from .model import DEFAULT_BLOCKS, AiResources, Blocks, Dimension, Totals
from .observations import HeadroomChecked, PoolChecked, Rejected, ReleaseFinished, TightPoolFallback
from .parent_links import ParentMismatchError
from .ports import WorkspaceGateway
from .resources import round_up_to_block
from .tiered import is_flat_pair, note_tiered, refuse_tiered_prompts
from .transfer import SETTLE, TransferContext, TransferPolicy, apply_transfer

EnsureOutcome = Literal["hot-path", "topped-up", "unmetered"]
ReleaseOutcome = Literal[
    "released", "nothing-to-release", "requires-decommission", "dry-run", "error"
]


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EnsureResult(_Result):
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


class ReleasePlan(_Result):
    """The exact transfer a release would send, computed from one read of the child."""

    before: Totals
    target: Totals
    lowered: tuple[Dimension, ...]
    requires_decommission: tuple[Dimension, ...]
    drafted: Totals
    tiered: bool = False
    """The child is in the tiered prompt shape: its prompts are left alone, projects only."""

    @property
    def would_release(self) -> bool:
        """True when at least one dimension would be lowered."""
        return bool(self.lowered)

    @property
    def units_returned(self) -> Totals:
        """Units the pool would get back."""
        return Totals(
            projects=self.before.projects - self.target.projects,
            prompts=self.before.prompts - self.target.prompts,
        )

    @property
    def natural_outcome(self) -> ReleaseOutcome:
        """The outcome a real release would report, were the transfer to succeed."""
        if self.lowered:
            return "released"
        if self.requires_decommission:
            return "requires-decommission"
        return "nothing-to-release"


class ReleaseResult(_Result):
    """What one release did (or, in a dry run, would do)."""

    outcome: ReleaseOutcome
    plan: ReleasePlan | None = None
    error_code: str | None = None
    attempts: int = 0


def _require_ids(**ids: str) -> None:
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
    _require_ids(child_id=child_id, parent_id=parent_id)
    need = need or Totals()
    child = gateway.read_resources(child_id)
    note_tiered(child, "child", ctx)
    before = child.totals()
    required = required_totals(child, need, include_drafted)
    # On a tiered child the prompts view is its tightest tier: a need that fits it fits both.
    new_totals = plan_top_up(child, required, blocks)
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
    new_totals = _capped_to_ceiling(before, required, new_totals, ceiling, ctx)
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


def _capped_to_ceiling(
    before: Totals,
    required: Totals,
    planned: Totals,
    ceiling: Ceiling | None,
    ctx: TransferContext,
) -> Totals:
    try:
        return cap_to_ceiling(before, required, planned, ceiling)
    except BrandAiLimitError:
        ctx.observer.record(Rejected(BrandAiLimitError.code))
        raise


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


def plan_release(child: AiResources, floor: Totals, blocks: Blocks) -> ReleasePlan:
    """The single source of truth for what a release does: floor, round-up, never to zero.

    Per dimension, target = max(floor, round_up(used + drafted, block)). Only a target below the
    total AND above 0 lowers the dimension; a would-be 0 keeps its total and is reported as
    requiring decommission, because the gateway silently ignores a transfer to 0. A tiered
    child's prompts keep their total: a release never sends it a flat ``prompts``.
    """
    before = child.totals()
    target: dict[str, int] = {Dimension.PROMPTS.value: before.prompts}
    lowered: list[Dimension] = []
    decommission: list[Dimension] = []
    for dim in (Dimension.PROJECTS,) if child.is_tiered else tuple(Dimension):
        usage = child.get(dim)
        wanted = max(floor.get(dim), round_up_to_block(usage.used + usage.drafted, blocks.get(dim)))
        if wanted == 0 and before.get(dim) > 0:
            decommission.append(dim)
            target[dim.value] = before.get(dim)
        elif wanted < before.get(dim):
            lowered.append(dim)
            target[dim.value] = wanted
        else:
            target[dim.value] = before.get(dim)
    return ReleasePlan(
        before=before,
        target=Totals(**target),
        lowered=tuple(lowered),
        requires_decommission=tuple(decommission),
        drafted=Totals(projects=child.projects.drafted, prompts=child.prompts.drafted),
        tiered=child.is_tiered,
    )


def release_surplus(
    gateway: WorkspaceGateway,
    child_id: str,
    ctx: TransferContext,
    *,
    floor: Totals | None = None,
    blocks: Blocks = DEFAULT_BLOCKS,
    dry_run: bool = False,
    policy: TransferPolicy = SETTLE,
    before_transfer: Callable[[ReleasePlan], None] | None = None,
) -> ReleaseResult:
    """Hand a child's surplus back to the pool, down to max(floor, used + drafted in blocks).

    A dry run reads and reports the exact target a real call would send, and transfers nothing.
    Expected failures (busy, settle timeout, pool exhausted, rate limited, unreachable) become
    an ``error`` result with a typed ``error_code``; anything unexpected propagates.
    ``before_transfer`` sees the plan just before its transfer is sent (the worker records the
    release's intent there); whatever it raises propagates and nothing is transferred.
    """
    _require_ids(child_id=child_id)
    child = gateway.read_resources(child_id)
    note_tiered(child, "child", ctx)
    plan = plan_release(child, floor or blocks.as_totals(), blocks)
    if dry_run:
        result = ReleaseResult(outcome="dry-run", plan=plan)
        # A preview counts what a real release would report: dry-run only when it would
        # release, so a sweep preview's nothing-to-release children are not counted as work.
        ctx.observer.record(
            ReleaseFinished("dry-run" if plan.would_release else plan.natural_outcome)
        )
        return result
    if not plan.would_release:
        result = ReleaseResult(outcome=plan.natural_outcome, plan=plan)
    else:
        if before_transfer is not None:
            before_transfer(plan)
        result = _transfer_release(gateway, child_id, plan, policy, ctx)
    ctx.observer.record(ReleaseFinished(result.outcome))
    return result


def _transfer_release(
    gateway: WorkspaceGateway,
    child_id: str,
    plan: ReleasePlan,
    policy: TransferPolicy,
    ctx: TransferContext,
) -> ReleaseResult:
    try:
        attempts = apply_transfer(
            gateway, child_id, plan.target, policy, ctx, include_prompts=not plan.tiered
        )
    except AllocationError as exc:
        if exc.code in _RELEASE_REJECTIONS:
            # A stuck child refuses releases too; the busy alarm must see it.
            ctx.observer.record(Rejected(exc.code))
        return ReleaseResult(outcome="error", plan=plan, error_code=exc.code)
    except Exception:
        ctx.observer.record(
            ReleaseFinished("error")
        )  # an uncoded failure is still a failed release
        raise
    return ReleaseResult(outcome="released", plan=plan, attempts=attempts)


_RELEASE_REJECTIONS = frozenset({WorkspaceBusyError.code, OrgPoolExhaustedError.code})
