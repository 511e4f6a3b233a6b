"""The ensure message body the message-contract tests start from."""

from __future__ import annotations

from typing import Any


def ensure_body(**overrides: Any) -> dict[str, Any]:
    """A valid ensure's JSON body, with ``overrides`` replacing or adding fields."""
    body: dict[str, Any] = {
        "kind": "ensure",
        "request_id": "req-1",
        "workspace_id": "child-1",
        "parent_workspace_id": "master-1",
        "need": {"projects": 1, "prompts": 40},
    }
    body.update(overrides)
    return body
