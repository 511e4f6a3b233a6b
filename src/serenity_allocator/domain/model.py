"""Domain values: resource counts, totals, blocks (and their block math) and workspace records.

A request's user authority as values, at the end: what ending it did
(:class:`CredentialEnd`), how long its access lives (:class:`AccessLifetime`) and how a holder
judges it before presenting it (:class:`TokenFreshness`). No token in any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field

Count = Annotated[int, Field(ge=0)]
BlockSize = Annotated[int, Field(ge=1)]


class Dimension(StrEnum):
    """The two metered AI dimensions a transfer moves."""

    PROJECTS = "projects"
    PROMPTS = "prompts"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Totals(_Frozen):
    """A pair of non-negative unit counts, one per dimension (needs, totals, floors, ceilings)."""

    projects: Count = 0
    prompts: Count = 0

    def get(self, dim: Dimension) -> int:
        """Return the count for one dimension."""
        return int(getattr(self, dim.value))

    def plus(self, other: Totals) -> Totals:
        """Element-wise sum (coalescing several needs into one)."""
        return Totals(projects=self.projects + other.projects, prompts=self.prompts + other.prompts)

    def as_dict(self) -> dict[str, int]:
        """The wire shape used in messages, outcomes and transfer bodies."""
        return {"projects": self.projects, "prompts": self.prompts}


class Blocks(_Frozen):
    """Whole-block sizes per dimension: top-ups grow in blocks so one serves many writes."""

    projects: BlockSize = 1
    prompts: BlockSize = 100

    def get(self, dim: Dimension) -> int:
        """Return the block size of one dimension."""
        return int(getattr(self, dim.value))

    def as_totals(self) -> Totals:
        """One block per dimension, the default release floor."""
        return Totals(projects=self.projects, prompts=self.prompts)


DEFAULT_BLOCKS = Blocks()


def round_up_to_block(units: int, block: int) -> int:
    """Round ``units`` up to the next whole multiple of ``block``; 0 or negative gives 0.

    Block math: quota moves in whole blocks per dimension (``Blocks``).
    """
    if block < 1:
        raise ValueError("block must be a positive whole number")
    if units <= 0:
        return 0
    return -(-units // block) * block


class DimensionUsage(_Frozen):
    """One dimension of a workspace's AI resources as the upstream reports it."""

    used: int
    drafted: int = 0
    total: int

    @property
    def free(self) -> int:
        """Units not yet used: ``total - used`` (the shared doc's definition)."""
        return self.total - self.used


class PromptTiers(_Frozen):
    """The tiered prompt shape: a daily and a weekly tier, each ``{used, total}``, no drafts.

    Seen live since 2026-08 (semrush-user-manager.md, "The tiered prompt shape"): such a
    workspace has no flat ``prompts`` at all, and nobody knows which tier a flat transfer moves.
    """

    daily: DimensionUsage
    weekly: DimensionUsage

    def tightest(self) -> DimensionUsage:
        """The tier with the fewest free prompts (daily on a tie): what a write meets first."""
        return self.weekly if self.weekly.free < self.daily.free else self.daily


class AiResources(_Frozen):
    """A workspace's AI resources; on a master workspace this is the org pool.

    A tiered workspace carries ``prompt_tiers``; its ``prompts`` is then the tightest tier, a
    read-only view for reports and headroom checks. No transfer is ever planned from it: a
    tiered workspace never gets a flat ``prompts`` transfer (see :attr:`is_tiered`).
    """

    projects: DimensionUsage
    prompts: DimensionUsage
    prompt_tiers: PromptTiers | None = None

    @classmethod
    def tiered(cls, projects: DimensionUsage, tiers: PromptTiers) -> AiResources:
        """A tiered workspace's resources, its ``prompts`` view being the tightest tier."""
        tightest = tiers.tightest()
        view = DimensionUsage(used=tightest.used, total=tightest.total)
        return cls(projects=projects, prompts=view, prompt_tiers=tiers)

    @property
    def is_tiered(self) -> bool:
        """True for the tiered prompt shape (daily + weekly tiers, no flat ``prompts``)."""
        return self.prompt_tiers is not None

    def get(self, dim: Dimension) -> DimensionUsage:
        """Return the usage of one dimension."""
        usage: DimensionUsage = getattr(self, dim.value)
        return usage

    def totals(self) -> Totals:
        """The current totals, clamped at zero for the Totals type."""
        return Totals(projects=max(0, self.projects.total), prompts=max(0, self.prompts.total))


class WorkspaceStatus(StrEnum):
    """Lifecycle states of a workspace, from ``GET /v1/workspaces/{id}/status``."""

    CREATED = "created"
    NOT_READY = "not ready"
    ERROR = "error"
    DELETING = "deleting"


class WorkspaceRecord(_Frozen):
    """One workspace of a family listing, reduced to what the allocator reads."""

    id: str
    title: str = ""
    status: str
    parent_id: str | None = None
    ai_limits_enabled: bool | None = None
    """``limits_enabled`` of the ``ai`` product tier; ``None`` when the tier is absent."""


SEMRUSH_SCOPE: Final = "semrush"
"""The scope an exchanged token carries only through the deployment's Semrush pair
(ims-promise-tokens.md): a token without it is refused by Semrush whatever its user."""


@dataclass(frozen=True)
class CredentialEnd:
    """The result of invalidating and scrubbing a request's promise token.

    ``invalidated``: True when IMS confirmed, False when it did not (best effort: logged and
    counted, the outcome stands), None when no token was invalidated (none held, or dead).
    ``scrub_error``: why the record kept its token (an AWS code), None when scrubbed.
    """

    invalidated: bool | None
    scrub_error: str | None = None


ASSUMED_ACCESS_LIFETIME_S = 299
"""An exchange answer without a usable ``expires_in`` is taken to live this long: the figure
both of Adobe's published IMS clients' fixtures carry (ims-promise-tokens.md, "Verified against
the upstream's own clients"); never longer, the safe side."""


@dataclass(frozen=True)
class AccessLifetime:
    """When an exchanged access token stops being presentable, on the caller's monotonic clock.

    Measured from the moment the exchange was SENT (IMS issued the token later, so the token
    is never thought younger than it is). ``expires_in`` is IMS's, in seconds.
    """

    expires_at: float

    @classmethod
    def of(cls, sent_at: float, expires_in: int | None) -> AccessLifetime:
        """The lifetime of a token whose exchange was sent at ``sent_at``."""
        seconds = ASSUMED_ACCESS_LIFETIME_S if expires_in is None else max(0, expires_in)
        return cls(sent_at + seconds)

    def outlives(self, now: float, call_s: float) -> bool:
        """True when a call started ``now`` and lasting ``call_s`` ends before the token dies."""
        return now + call_s < self.expires_at


@dataclass(frozen=True)
class TokenFreshness:
    """How a holder judges an exchanged access token before presenting it.

    ``clock``: monotonic seconds (injected; the same clock the exchange's send time is read
    on). ``call_s``: the longest one call presenting the token may last (its timeout): a token
    that would die before such a call ends is exchanged again first.
    """

    clock: Callable[[], float]
    call_s: float = 0.0

    def lifetime_of(self, sent_at: float, expires_in: int | None) -> AccessLifetime:
        """The lifetime of a token whose exchange was sent at ``sent_at`` (this clock)."""
        return AccessLifetime.of(sent_at, expires_in)

    def presentable(self, lifetime: AccessLifetime) -> bool:
        """True when a call started now ends before the token's lifetime does."""
        return lifetime.outlives(self.clock(), self.call_s)
