"""Release surplus after deletes: hand a child's units back, down to its floor, never to 0.

:func:`plan_release` is the one release plan, for the worker, the sweep and sibling reclaim
alike; so the choice of which idle siblings can give surplus back when the pool is exhausted
lives beside it (:func:`choose_reclaim_siblings`). That choice needs no shared state: each
sibling's own resources say what it can give, and the release is applied later by the worker
in the sibling's own message group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .allocation import FrozenResult, require_ids
from .errors import AllocationError, OrgPoolExhaustedError, UpstreamError, WorkspaceBusyError
from .model import (
    DEFAULT_BLOCKS,
    AiResources,
    Blocks,
    Dimension,
    Totals,
    WorkspaceStatus,
    round_up_to_block,
)
from .observations import Rejected, ReleaseFinished
from .ports import WorkspaceGateway
from .transfer import (
    SETTLE,
    TransferContext,
    TransferPolicy,
    TransferTarget,
    apply_transfer,
    note_tiered,
)

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
