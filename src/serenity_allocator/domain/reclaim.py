"""Sibling reclaim: which idle siblings can give surplus back when the pool is exhausted.

The decision needs no shared state: each sibling's own resources say what it can give, and
the release itself is computed by :func:`plan_release` (the single source of truth), applied
later by the worker in the sibling's own message group.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from .errors import AllocationError, UpstreamError
from .model import Blocks, Dimension, Totals, WorkspaceStatus
from .ports import WorkspaceGateway
from .release import plan_release


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
