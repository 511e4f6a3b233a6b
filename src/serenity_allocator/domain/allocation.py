"""Moving quota between a child and its pool: headroom before a write, surplus back after deletes.

An ensure's headroom is sized by the pool, capped by the ceiling, with the tight-pool fallback.

At the end, releasing surplus after deletes: a child's units handed back, down to its floor,
never to 0. :func:`plan_release` is the one release plan, for the worker, the sweep and
sibling reclaim alike; so the choice of which idle siblings can give surplus back when the
pool is exhausted lives beside it (:func:`choose_reclaim_siblings`). That choice needs no
shared state: each sibling's own resources say what it can give, and the release is applied
later by the worker in the sibling's own message group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from .container_memory import InFlightUnits
from .errors import (
    AllocationError,
    BrandAiLimitError,
    OrgPoolExhaustedError,
    ParentMismatchError,
    UpstreamError,
    WiringError,
    WorkspaceBusyError,
)
from .model import (
    DEFAULT_BLOCKS,
    AiResources,
    Blocks,
    Dimension,
    Totals,
    WorkspaceStatus,
    round_up_to_block,
)
from .observations import HeadroomChecked, PoolChecked, Rejected, ReleaseFinished, TightPoolFallback
from .ports import WorkspaceGateway
from .sizing import Ceiling, PoolShare, Sizing, cap_to_ceiling, is_short, needs_pool, plan_sizing
from .transfer import (
    SETTLE,
    TransferContext,
    TransferPolicy,
    TransferTarget,
    apply_transfer,
    is_flat_pair,
    note_tiered,
    refuse_tiered_prompts,
)

EnsureOutcome = Literal["hot-path", "topped-up", "rightsized", "unmetered"]


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


@dataclass(frozen=True)
class EnsureAsk:
    """What one ensure asks: room on ``child_id`` for ``need`` more, from ``parent_id``'s pool.

    ``include_drafted``: size prompts on used + drafted + need (the write gate's rule).
    ``ceiling``: the per-brand cap in force (message and backstop combined); a sized target
    above it is capped, only an exact need above it is refused.
    """

    child_id: str
    parent_id: str
    need: Totals = field(default_factory=Totals)
    include_drafted: bool = True
    ceiling: Ceiling | None = None


@dataclass(frozen=True)
class EnsureRules:
    """The container's rules for every ensure: the blocks, the transfer policy, the fallback.

    ``blocks``: the most headroom a top-up adds beyond the need (pools with room); the pool
    sizes it below that (:mod:`.sizing`). ``exact_fallback``: on pool exhaustion, retry once
    with the exact required totals before rejecting.
    """

    policy: TransferPolicy
    blocks: Blocks = DEFAULT_BLOCKS
    exact_fallback: bool = False


class PoolFamily(Protocol):
    """What the ensure asks of the pool's family listing (``ParentLinks``)."""

    def is_parent_of(self, parent_id: str, child_id: str) -> bool:
        """True only when the upstream lists ``child_id`` under ``parent_id``."""
        ...

    def children_of(self, parent_id: str) -> int:
        """How many children the pool has (the children that may ask of it), at least 1."""
        ...


def _no_announcement(before: Totals, target: Totals) -> None:
    """No one to tell before a transfer (pure callers)."""


@dataclass(frozen=True)
class EnsureHooks:
    """What the ensure may ask of its caller; each optional.

    ``is_unmetered``: true for a parent that does not meter AI writes (a needed top-up is
    skipped: carving could only fail requests). ``family``: checks ``parent_id`` is the child's
    real parent before anything moves, and tells how many children share the pool (without
    it the pool is shared by one). ``last_pool_free``: the pool's free units at this
    container's last read of it (``PoolWatch.last_free``), which spares a hot path a pool read
    that could not move anything. ``in_flight``: what this container's recent ensures of the
    child made room for and its use does not show yet; the ensure adds it to its need, and
    notes its own once served. ``before_transfer``: sees (totals before, target) just
    before each transfer is sent (the worker records the intent there); whatever it raises
    propagates and nothing is transferred.
    """

    is_unmetered: Callable[[str], bool] | None = None
    family: PoolFamily | None = None
    last_pool_free: Callable[[str], Totals | None] | None = None
    in_flight: InFlightUnits | None = None
    before_transfer: Callable[[Totals, Totals], None] = _no_announcement


NO_HOOKS = EnsureHooks()


def ensure_headroom(
    gateway: WorkspaceGateway,
    ask: EnsureAsk,
    rules: EnsureRules,
    ctx: TransferContext,
    hooks: EnsureHooks = NO_HOOKS,
) -> EnsureResult:
    """Make sure the child can take ``ask.need`` more units, sized by the pool it draws from.

    The hot path (nothing short, headroom between the refill mark and high water) costs exactly
    one read. Otherwise the pool is read (reported; ADVISORY for a raise, whose 422 is the only
    authoritative exhaustion signal) and :func:`.plan_sizing` decides: a short child is topped
    up, one under its refill mark is refilled ahead, one holding surplus of a tight pool gives
    it back, all in one absolute transfer of both dimensions. A refill or a surplus return the
    pool or the family does not allow ends as the hot path: the request's room is there.
    With ``hooks.in_flight`` the units the child's other recent ensures made room for, and its
    use does not show yet, are carved beside this need where the pool and the ceiling have them
    (never refusing this request for them); a served ensure is then remembered there.

    Raises:
        WiringError: a blank id, before any call.
        ParentMismatchError: a short child's parent is not ``parent_id`` (no transfer).
        BrandAiLimitError: the exact need would pass the ceiling (no transfer).
        TieredPromptsError: a prompts top-up on a tiered child or from a tiered pool (no
            transfer; terminal). A projects-only top-up there sends projects only.
        OrgPoolExhaustedError, WorkspaceBusyError, and the transfer's other errors.
    """
    require_ids(child_id=ask.child_id, parent_id=ask.parent_id)
    child = gateway.read_resources(ask.child_id)
    in_flight = hooks.in_flight
    if in_flight is None:
        return _ensure(gateway, _Sizing(ask, rules, ctx, hooks), child)
    in_use = required_totals(child, Totals(), ask.include_drafted)
    pending = in_flight.pending(ask.child_id, in_use)
    result = _ensure(gateway, _Sizing(ask, rules, ctx, hooks, pending), child)
    in_flight.note(ask.child_id, in_use, ask.need)
    return result


def _ensure(gateway: WorkspaceGateway, run: _Sizing, child: AiResources) -> EnsureResult:
    """The ensure on the child as read: the hot path, or sized by the pool."""
    ask, rules, ctx, hooks = run.ask, run.rules, run.ctx, run.hooks
    before = child.totals()
    required = required_totals(child, ask.need, ask.include_drafted)
    note_tiered(child, "child", ctx)
    hot = EnsureResult(outcome="hot-path", before=before, after=before)
    wanted = required.plus(run.in_flight)
    if not needs_pool(child, wanted, rules.blocks, _last_share(ask.parent_id, hooks)):
        ctx.observer.record(HeadroomChecked("hot-path"))
        return hot
    short = is_short(child, required)
    family = hooks.family
    # Before anything that trusts the parent (the unmetered shortcut, the pool, a transfer):
    # a parent that is not the child's real one makes a short request invalid; a request that
    # fits keeps its hot path and moves nothing.
    if family is not None and not family.is_parent_of(ask.parent_id, ask.child_id):
        if short:
            raise ParentMismatchError()
        ctx.observer.record(HeadroomChecked("hot-path"))
        return hot
    if hooks.is_unmetered is not None and hooks.is_unmetered(ask.parent_id):
        ctx.observer.record(HeadroomChecked("unmetered" if short else "hot-path"))
        return EnsureResult(outcome="unmetered", before=before, after=before) if short else hot
    if short:
        # An exact need above the ceiling is refused before the pool is read.
        _within_ceiling(before, required, ask.ceiling, ctx)
    return _sized(gateway, run, child, required, short)


def _within_ceiling(
    before: Totals, required: Totals, ceiling: Ceiling | None, ctx: TransferContext
) -> None:
    try:
        cap_to_ceiling(before, required, _exact_totals(before, required), ceiling)
    except BrandAiLimitError:
        ctx.observer.record(Rejected(BrandAiLimitError.code))
        raise


def _last_share(parent_id: str, hooks: EnsureHooks) -> PoolShare | None:
    """The pool's share as this container last read it, or None (never read, or no hook)."""
    if hooks.last_pool_free is None:
        return None
    free = hooks.last_pool_free(parent_id)
    if free is None:
        return None
    return PoolShare(free=free, children=_children_of(parent_id, hooks))


def _children_of(parent_id: str, hooks: EnsureHooks) -> int:
    """How many children share the pool: the family's count, or one without a family."""
    family = hooks.family
    return 1 if family is None else family.children_of(parent_id)


@dataclass(frozen=True)
class _Sizing:
    """One ensure: what it asks, under which rules, told to whom."""

    ask: EnsureAsk
    rules: EnsureRules
    ctx: TransferContext
    hooks: EnsureHooks
    in_flight: Totals = field(default_factory=Totals)
    """Units the child's other requests were served and have not written yet."""


@dataclass(frozen=True)
class _Change:
    """A child's totals before a transfer, and the totals the transfer sets."""

    before: Totals
    target: Totals


@dataclass(frozen=True)
class _PoolRead:
    """The pool as this ensure read it, and whether prompts move too (a flat pair)."""

    resources: AiResources
    with_prompts: bool


def _sized(
    gateway: WorkspaceGateway, run: _Sizing, child: AiResources, required: Totals, short: bool
) -> EnsureResult:
    """Read the pool, plan the sized totals, and transfer them (or stay on the hot path)."""
    ask, ctx = run.ask, run.ctx
    before = child.totals()
    exact = _exact_totals(before, required)
    if short:
        # A short prompts raise on a tiered child or from a tiered pool is refused first.
        refuse_tiered_prompts(child, before, exact, ctx)
    pool = gateway.read_resources(ask.parent_id)
    note_tiered(pool, "pool", ctx)
    ctx.observer.record(PoolChecked(ask.parent_id, pool))
    with_prompts = is_flat_pair(child, pool)
    # ``short`` stays this request's own: a top-up for the other requests' units that the
    # pool then refuses leaves this one the room it has, as a refill ahead does.
    required = _with_in_flight(run, pool, before, required)
    if short:
        refuse_tiered_prompts(pool, before, exact, ctx)
    movable = tuple(Dimension) if with_prompts else (Dimension.PROJECTS,)
    plan = plan_sizing(
        child,
        required,
        run.rules.blocks,
        PoolShare.of(pool, _children_of(ask.parent_id, run.hooks)),
        movable,
    )
    try:
        target = cap_to_ceiling(before, required, plan.target, ask.ceiling)
    except BrandAiLimitError:
        # Only a refill ahead can get here (a short need above the ceiling was refused
        # already): a child at its ceiling keeps what it holds.
        target = before
    if target == before:
        ctx.observer.record(HeadroomChecked("hot-path"))
        return EnsureResult(outcome="hot-path", before=before, after=before)
    if short:
        return _top_up(
            gateway, run, _Change(before, target), required, _PoolRead(pool, with_prompts)
        )
    return _ahead(gateway, run, _Change(before, target), plan.sizing, with_prompts)


def _ahead(
    gateway: WorkspaceGateway,
    run: _Sizing,
    change: _Change,
    sizing: Sizing,
    with_prompts: bool,
) -> EnsureResult:
    """A refill ahead or a surplus return for a request whose room is already there.

    Refused by the pool (it drained since the read) or by a busy child, it leaves the child
    as it was: the request still has its room, so it ends on the hot path.
    """
    before, target = change.before, change.target
    outcome: EnsureOutcome = "rightsized" if sizing == "rightsized" else "topped-up"
    ctx = run.ctx
    run.hooks.before_transfer(before, target)
    try:
        attempts = apply_transfer(
            gateway,
            TransferTarget(run.ask.child_id, target, include_prompts=with_prompts),
            run.rules.policy,
            ctx,
        )
    except (OrgPoolExhaustedError, WorkspaceBusyError):
        ctx.observer.record(HeadroomChecked("hot-path"))
        return EnsureResult(outcome="hot-path", before=before, after=before)
    ctx.observer.record(HeadroomChecked(sizing))
    return EnsureResult(outcome=outcome, before=before, after=target, attempts=attempts)


def _top_up(
    gateway: WorkspaceGateway,
    run: _Sizing,
    change: _Change,
    required: Totals,
    pool: _PoolRead,
) -> EnsureResult:
    """Transfer the sized ``change.target`` to a short child that needs ``required``."""
    before, planned = change.before, change.target
    ctx, rules, announce = run.ctx, run.rules, run.hooks.before_transfer
    # Counted when attempted, not when it succeeds: the hot-path ratio must show the top-ups
    # a dry pool refuses.
    ctx.observer.record(HeadroomChecked("topped-up"))
    child_id = run.ask.child_id
    exact = _exact_totals(before, required)
    if not _fits(pool.resources, before, exact):
        # The pool read a moment ago cannot cover even the exact need: no transfer that is all
        # but sure to be refused (on a tight pool, the normal case, it would cost a call per
        # refused request for nothing; ADR 0027).
        ctx.observer.record(Rejected(OrgPoolExhaustedError.code))
        raise OrgPoolExhaustedError()
    try:
        announce(before, planned)
        attempts = _transfer_recording_rejections(
            gateway, run, TransferTarget(child_id, planned, include_prompts=pool.with_prompts)
        )
    except OrgPoolExhaustedError:
        if not rules.exact_fallback or exact == planned:
            ctx.observer.record(Rejected(OrgPoolExhaustedError.code))
            raise
        attempts = _exact_fallback(gateway, run, pool, _Change(before, exact))
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
    run: _Sizing,
    pool: _PoolRead,
    change: _Change,
) -> int:
    """Retry a refused sized top-up once with the exact totals; re-raise if refused.

    The read showed the exact totals fit (else nothing was sent), so only a pool drained since
    the read refused the sized ones, and the exact ones may still fit.
    """
    before, exact = change.before, change.target
    ctx = run.ctx
    try:
        run.hooks.before_transfer(before, exact)
        attempts = _transfer_recording_rejections(
            gateway, run, TransferTarget(run.ask.child_id, exact, include_prompts=pool.with_prompts)
        )
    except OrgPoolExhaustedError:
        ctx.observer.record(TightPoolFallback("rejected"))
        ctx.observer.record(Rejected(OrgPoolExhaustedError.code))
        raise
    ctx.observer.record(TightPoolFallback("saved"))
    return attempts


def _with_in_flight(run: _Sizing, pool: AiResources, before: Totals, required: Totals) -> Totals:
    """``required`` with the other requests' units on their way, if the pool and ceiling allow.

    Otherwise ``required`` alone: what cannot be had for them never refuses a request whose own
    need fits.
    """
    wanted = required.plus(run.in_flight)
    exact = _exact_totals(before, wanted)
    try:
        cap_to_ceiling(before, wanted, exact, run.ask.ceiling)
    except BrandAiLimitError:
        return required
    return wanted if _fits(pool, before, exact) else required


def _fits(pool: AiResources, before: Totals, target: Totals) -> bool:
    return all(target.get(dim) - before.get(dim) <= pool.get(dim).free for dim in Dimension)


def _exact_totals(before: Totals, required: Totals) -> Totals:
    return Totals(**{dim.value: max(before.get(dim), required.get(dim)) for dim in Dimension})


def _transfer_recording_rejections(
    gateway: WorkspaceGateway, run: _Sizing, target: TransferTarget
) -> int:
    ctx = run.ctx
    try:
        return apply_transfer(gateway, target, run.rules.policy, ctx)
    except WorkspaceBusyError:
        ctx.observer.record(Rejected(WorkspaceBusyError.code))
        raise


ReleaseOutcome = Literal[
    "released", "nothing-to-release", "requires-decommission", "dry-run", "error"
]


class ReleasePlan(FrozenResult):
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


class ReleaseResult(FrozenResult):
    """What one release did (or, in a dry run, would do)."""

    outcome: ReleaseOutcome
    plan: ReleasePlan
    """The plan it read (every release, previewed or not, plans from one read first)."""
    error_code: str | None = None
    attempts: int = 0


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


@dataclass(frozen=True)
class ReleaseAsk:
    """What one release asks: hand ``child_id``'s surplus back to its pool.

    ``floor``: the least the child keeps (None: one block of each). ``dry_run``: read and
    report the exact target a real release would send, and transfer nothing.
    """

    child_id: str
    floor: Totals | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class ReleaseRules:
    """The container's rules for every release: the blocks and the transfer policy."""

    blocks: Blocks = DEFAULT_BLOCKS
    policy: TransferPolicy = SETTLE


RELEASE_RULES = ReleaseRules()
"""One block of each, under the settle policy."""


def release_surplus(
    gateway: WorkspaceGateway,
    ask: ReleaseAsk,
    ctx: TransferContext,
    rules: ReleaseRules = RELEASE_RULES,
    before_transfer: Callable[[ReleasePlan], None] | None = None,
) -> ReleaseResult:
    """Hand a child's surplus back to the pool, down to max(floor, used + drafted in blocks).

    A dry run reads and reports the exact target a real call would send, and transfers nothing.
    Expected failures (busy, settle timeout, pool exhausted, rate limited, unreachable) become
    an ``error`` result with a typed ``error_code``; anything unexpected propagates.
    ``before_transfer`` sees the plan just before its transfer is sent (the worker records the
    release's intent there); whatever it raises propagates and nothing is transferred.
    """
    child_id, blocks = ask.child_id, rules.blocks
    require_ids(child_id=child_id)
    child = gateway.read_resources(child_id)
    plan = plan_release(child, ask.floor or blocks.as_totals(), blocks)
    note_tiered(child, "child", ctx)
    if ask.dry_run:
        result = ReleaseResult(outcome="dry-run", plan=plan)
        # A preview counts what a real release would report: dry-run only when it would
        # release, so a sweep preview's nothing-to-release children are not counted as work.
        ctx.observer.record(
            ReleaseFinished("dry-run" if plan.would_release else plan.natural_outcome)
        )
        return result
    if plan.would_release:
        if before_transfer is not None:
            before_transfer(plan)
        try:
            attempts = apply_transfer(
                gateway,
                TransferTarget(child_id, plan.target, include_prompts=not plan.tiered),
                rules.policy,
                ctx,
            )
        except AllocationError as exc:
            if exc.code in _RELEASE_REJECTIONS:
                # A stuck child refuses releases too; the busy alarm must see it.
                ctx.observer.record(Rejected(exc.code))
            result = ReleaseResult(outcome="error", plan=plan, error_code=exc.code)
        except Exception:
            # An uncoded failure is still a failed release.
            ctx.observer.record(ReleaseFinished("error"))
            raise
        else:
            result = ReleaseResult(outcome="released", plan=plan, attempts=attempts)
    else:
        result = ReleaseResult(outcome=plan.natural_outcome, plan=plan)
    ctx.observer.record(ReleaseFinished(result.outcome))
    return result


_RELEASE_REJECTIONS = frozenset({WorkspaceBusyError.code, OrgPoolExhaustedError.code})


# Sibling reclaim: which idle siblings can give surplus back when the pool is exhausted.


class ReclaimCandidate(BaseModel):
    """A sibling with surplus to give and the units a release would return."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace_id: str
    units: Totals


@dataclass(frozen=True)
class ReclaimRules:
    """How much a reclaim takes.

    Each sibling keeps ``floor`` and gives back whole ``blocks``; at most ``max_siblings``
    siblings are asked.
    """

    floor: Totals
    blocks: Blocks
    max_siblings: int


def choose_reclaim_siblings(
    gateway: WorkspaceGateway, parent_id: str, child_id: str, rules: ReclaimRules
) -> list[ReclaimCandidate]:
    """The siblings of ``child_id`` with the most reclaimable surplus, at most ``max_siblings``.

    Skips siblings that are not ``created``, that hold pending drafts (their drafts need units
    at publish) and that have less than one block to give in every dimension.
    """
    blocks = rules.blocks
    candidates: list[ReclaimCandidate] = []
    for record in gateway.list_family(parent_id):
        if record.id in (parent_id, child_id) or record.parent_id != parent_id:
            continue
        if record.status != WorkspaceStatus.CREATED:
            continue
        try:
            resources = gateway.read_resources(record.id)
        except (UpstreamError, AllocationError):
            continue  # one unreadable sibling (deleted, throttled) must not sink the reclaim
        if resources.projects.drafted or resources.prompts.drafted:
            continue
        plan = plan_release(resources, rules.floor, blocks)
        units = plan.units_returned
        if not any(units.get(dim) >= blocks.get(dim) for dim in Dimension):
            continue
        candidates.append(ReclaimCandidate(workspace_id=record.id, units=units))
    candidates.sort(key=lambda c: (c.units.prompts, c.units.projects), reverse=True)
    return candidates[: rules.max_siblings]


def reclaim_request_id(request_id: str, receive_count: int, sibling_id: str) -> str:
    """The id of a reclaim release: deterministic per park (a redelivered park is deduplicated).

    Short whatever the ids.
    """
    digest = hashlib.sha256(f"{request_id}|{receive_count}|{sibling_id}".encode()).hexdigest()
    return f"reclaim-{digest[:32]}"
