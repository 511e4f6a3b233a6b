"""The rules for a workspace in the tiered prompt shape (daily + weekly tiers, no ``prompts``).

Facts (semrush-user-manager.md, "The tiered prompt shape"): the transfer still takes only a flat
``prompts`` number and nobody knows which tier it would move, so the upstream never wrote to a
tiered workspace. Here: a need every tier already covers is served with no transfer; a need
that would take a prompts transfer on a tiered child or pool is refused at once, terminal
(``tieredPrompts``); projects are untouched by the drift, so a projects-only top-up or release
still goes ahead, sending projects only.
"""

from __future__ import annotations

from .errors import TieredPromptsError
from .model import AiResources, Totals
from .observations import Rejected, TieredWorkspaceMet
from .transfer import TransferContext


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
