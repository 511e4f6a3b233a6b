"""Reading a field of a queue message's JSON body, for the local tools (the stack, the redrive)."""

from __future__ import annotations

import json


def body_field(body: str, name: str) -> str | None:
    """The string field ``name`` of a JSON object body; None if absent or not JSON."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    value = parsed.get(name) if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else None
