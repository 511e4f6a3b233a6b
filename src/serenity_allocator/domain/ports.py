"""Ports the domain owns: the workspace gateway, a clock, a sleeper and an observer."""

from __future__ import annotations

from typing import Protocol

from .model import AiResources, Totals, WorkspaceRecord


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

    def headroom_checked(self, outcome: str) -> None:
        """One ensure finished the headroom check (``hot-path``, ``topped-up``, ...)."""
        ...

    def transfer_timed(self, path: str, latency_ms: float) -> None:
        """One transfer call on a path (``fail-fast`` or ``settle``) ended after ``latency_ms``.

        Accepted or refused alike; the call alone (no retry sleep, no settle poll).
        """
        ...

    def pool_checked(self, parent_id: str, pool: AiResources) -> None:
        """The advisory pool read returned ``pool`` (free counts, ratios)."""
        ...

    def rejected(self, reason: str) -> None:
        """An allocation was refused for ``reason`` (an error code)."""
        ...

    def not_ready_retry(self) -> None:
        """A transfer met ``workspace not ready`` and will be retried."""
        ...

    def release_finished(self, outcome: str) -> None:
        """A release ended with ``outcome`` (released, nothing-to-release, ...)."""
        ...

    def tight_pool_fallback(self, result: str) -> None:
        """The exact-totals fallback after a pool-exhausted top-up ``saved`` or ``rejected`` it."""
        ...

    def tiered_met(self, role: str) -> None:
        """A request met a workspace in the tiered prompt shape as its ``child`` or ``pool``."""
        ...


class NullObserver:
    """An observer that records nothing (the default for pure callers and tests)."""

    def headroom_checked(self, outcome: str) -> None:
        """Ignore."""

    def transfer_timed(self, path: str, latency_ms: float) -> None:
        """Ignore."""

    def pool_checked(self, parent_id: str, pool: AiResources) -> None:
        """Ignore."""

    def rejected(self, reason: str) -> None:
        """Ignore."""

    def not_ready_retry(self) -> None:
        """Ignore."""

    def release_finished(self, outcome: str) -> None:
        """Ignore."""

    def tight_pool_fallback(self, result: str) -> None:
        """Ignore."""

    def tiered_met(self, role: str) -> None:
        """Ignore."""
