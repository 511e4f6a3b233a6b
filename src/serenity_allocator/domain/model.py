"""Domain values: resource counts, totals, blocks and workspace records."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

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


class DimensionUsage(_Frozen):
    """One dimension of a workspace's AI resources as the upstream reports it."""

    used: int
    drafted: int = 0
    total: int

    @property
    def free(self) -> int:
        """Units not yet used: ``total - used`` (the shared doc's definition)."""
        return self.total - self.used


class AiResources(_Frozen):
    """A workspace's AI resources; on a master workspace this is the org pool."""

    projects: DimensionUsage
    prompts: DimensionUsage

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
