"""Ports the domain owns: the workspace gateway, a clock, a sleeper and an observer."""

from __future__ import annotations

from typing import Protocol

from .model import AiResources, Totals, WorkspaceRecord
from .observations import AllocationEvent


class WorkspaceGateway(Protocol):
    """The four User Manager operations the allocation rules need."""

    def read_resources(self, workspace_id: str) -> AiResources:
        """Read a workspace's AI resources (the org pool when given a master id)."""
        ...

    def transfer(self, workspace_id: str, totals: Totals, *, include_prompts: bool = True) -> None:
        """Set the child's totals ABSOLUTELY, both dimensions in one body.

        ``include_prompts=False`` sends projects only: the call for a tiered child or pool,
        which must never get a flat ``prompts`` (the domain passes it only then).
        """
        ...

    def read_status(self, workspace_id: str) -> str:
        """Read the workspace's lifecycle status (``created``, ``not ready``, ...)."""
        ...

    def list_family(self, parent_id: str) -> list[WorkspaceRecord]:
        """List the parent and all its descendants."""
        ...


class Clock(Protocol):
    """Monotonic seconds; injected so tests never wait for real."""

    def __call__(self) -> float:
        """Return the current monotonic time in seconds."""
        ...


class Sleeper(Protocol):
    """Sleeps for the given seconds; injected so tests never wait for real."""

    def __call__(self, seconds: float, /) -> None:
        """Block for ``seconds``."""
        ...


class AllocationObserver(Protocol):
    """Where the domain reports what it measured; adapters turn these into metrics and logs."""

    def record(self, event: AllocationEvent, /) -> None:
        """Record one event (best-effort: a report never changes control flow)."""
        ...


class NullObserver:
    """An observer that records nothing (the default for pure callers and tests)."""

    def record(self, event: AllocationEvent, /) -> None:
        """Ignore."""
