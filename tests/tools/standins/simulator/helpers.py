"""Helpers shared by the simulator's test modules: a fake clock, seed shapes, request bodies."""

from __future__ import annotations

from typing import Any

TOKEN = "test-token"
MASTER = "master"


class FakeClock:
    """Monotonic seconds that only move when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingSleep:
    """A sleep that returns at once and remembers what it was asked."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def usage(used: int, total: int, drafted: int = 0) -> dict[str, int]:
    return {"used": used, "drafted": drafted, "total": total}


def family_seed(
    *,
    projects: int = 10,
    prompts: int = 1000,
    children: tuple[str, ...] = ("c1", "c2"),
    master_limits_enabled: bool = True,
) -> list[dict[str, Any]]:
    seed: list[dict[str, Any]] = [
        {
            "id": MASTER,
            "title": "Org",
            "limits_enabled": master_limits_enabled,
            "ai": {"projects": usage(0, projects), "prompts": usage(0, prompts)},
        }
    ]
    seed += [{"id": child, "title": child.upper(), "parent_id": MASTER} for child in children]
    return seed


def transfer_body(projects: int | None = None, prompts: int | None = None) -> dict[str, Any]:
    ai = {}
    if projects is not None:
        ai["projects"] = projects
    if prompts is not None:
        ai["prompts"] = prompts
    return {"resources": {"ai": ai}}


def ai_of(dump: dict[str, Any], workspace_id: str) -> dict[str, dict[str, int]]:
    by_id = {w["id"]: w for w in dump["workspaces"]}
    ai: dict[str, dict[str, int]] = by_id[workspace_id]["ai"]
    return ai
