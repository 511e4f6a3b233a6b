"""What the Semrush client tests share: the seeded family, the token, fakes, call-log readers."""

from __future__ import annotations

import socket
from typing import Any

from serenity_tools.standins.simulator import SimulatorServer

SECRET_TOKEN = "tok-SECRET-123"

FAMILY: list[dict[str, Any]] = [
    {
        "id": "m1",
        "title": "Org",
        "parent_id": None,
        "limits_enabled": True,
        "ai": {
            "projects": {"used": 0, "drafted": 0, "total": 100},
            "prompts": {"used": 0, "drafted": 0, "total": 20000},
        },
    },
    {
        "id": "c1",
        "title": "Brand one",
        "parent_id": "m1",
        "ai": {
            "projects": {"used": 1, "drafted": 0, "total": 2},
            "prompts": {"used": 150, "drafted": 20, "total": 200},
        },
    },
    {
        "id": "c2",
        "title": "Unmetered brand",
        "parent_id": "m1",
        "limits_enabled": False,
        "ai": {"projects": {"used": 0, "total": 1}, "prompts": {"used": 0, "total": 100}},
    },
]


class RecordingSleep:
    """The injected sleep: records every requested pause and never waits."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class RotatingTokenProvider:
    """Hands out a stale token until asked to refresh, then the fresh one."""

    def __init__(self, stale: str, fresh: str) -> None:
        self.current = stale
        self.fresh = fresh
        self.refreshes = 0

    def get_token(self, *, refresh: bool = False) -> str:
        if refresh:
            self.refreshes += 1
            self.current = self.fresh
        return self.current


def calls_of(sim: SimulatorServer, op: str) -> list[dict[str, Any]]:
    return [call for call in sim.calls() if call["op"] == op]


def statuses_of(sim: SimulatorServer, op: str) -> list[int]:
    return [call["status"] for call in calls_of(sim, op)]


def workspace_of(sim: SimulatorServer, workspace_id: str) -> dict[str, Any]:
    return next(w for w in sim.dump()["workspaces"] if w["id"] == workspace_id)


def closed_port_origin() -> str:
    # Bind and release an ephemeral port: nothing listens there afterwards.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
