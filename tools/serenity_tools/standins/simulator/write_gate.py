"""The Project Engine write gate: metered prompt and project writes, enforced with a lag.

Facts (semrush-user-manager.md, "Metered writes happen elsewhere"):

- Prompts are metered at the WRITE, cumulatively: ``used + drafted + batch > total`` refuses
  the batch WHOLE (nothing of it lands); publishing moves drafted to used with no quota check.
  A project counts one unit.
- Prompts a request staged into a write that was finally refused are deleted again. The doc
  names no route for it; the stand-in's is ``POST .../prompts/discard`` ``{"count": n}``
  (shaped like publish): n drafted prompts go away, never metered.
- A refusal is the DISGUISED 405: a bare nginx ``text/html`` page with no quota wording. A
  genuine Method-Not-Allowed is JSON.
- Enforcement lags transfers by about 9 s: the gate compares against the total as it was
  ``enforcement_lag_ms`` ago, so a raise is enforced late, and so is a lowering.
- A parent whose ``ai`` tier has ``limits_enabled: false`` does not meter writes at all.

The functions here act on one workspace under the state's lock; the state does routing, auth,
faults and the call log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .model import (
    _INVALID_JSON,
    DISGUISED_QUOTA_405,
    MSG_METHOD_NOT_ALLOWED,
    OP_CREATE_PROJECT,
    OP_DELETE_PROJECT,
    OP_DELETE_PROMPTS,
    OP_DISCARD_DRAFTS,
    OP_PUBLISH_PROMPTS,
    OP_WRITE_PROMPTS,
    PROMPT_TIERS,
    TRANSFERABLE_DIMENSIONS,
    SimResponse,
    _bad_request,
    _Workspace,
)

# Paths relative to PROJECT_ENGINE_PREFIX; the id is URL-decoded after matching. Every route
# of the write gate is here, deletes included (the upstream's delete paths are not documented:
# these are the simulator's, so a service's deletes free real units in local tests).
WRITE_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", re.compile(r"^/v1/workspaces/([^/]+)/prompts$"), OP_WRITE_PROMPTS),
    ("POST", re.compile(r"^/v1/workspaces/([^/]+)/prompts/publish$"), OP_PUBLISH_PROMPTS),
    ("POST", re.compile(r"^/v1/workspaces/([^/]+)/prompts/discard$"), OP_DISCARD_DRAFTS),
    ("POST", re.compile(r"^/v1/workspaces/([^/]+)/projects$"), OP_CREATE_PROJECT),
    ("DELETE", re.compile(r"^/v1/workspaces/([^/]+)/prompts$"), OP_DELETE_PROMPTS),
    ("DELETE", re.compile(r"^/v1/workspaces/([^/]+)/projects$"), OP_DELETE_PROJECT),
)

_HISTORY_LIMIT = 64
"""Total changes kept per dimension: far more than one lag window ever holds."""

METHOD_NOT_ALLOWED = SimResponse(405, {"message": MSG_METHOD_NOT_ALLOWED})
"""Any other method on a write path: the gateway's genuine (JSON) 405."""

QUOTA_REFUSAL = SimResponse(405, DISGUISED_QUOTA_405, content_type="text/html")


def seed_history(workspace: _Workspace, since: float = float("-inf")) -> None:
    """Start the lag history at the current totals (a seed is enforced at once)."""
    workspace.total_history = {
        dim: [(since, workspace.ai[dim].total)] for dim in TRANSFERABLE_DIMENSIONS
    }


def record_total(workspace: _Workspace, dim: str, now: float) -> None:
    """Note that ``dim``'s total changed at ``now``; the gate sees it a lag later."""
    history = workspace.total_history.setdefault(dim, [(float("-inf"), 0)])
    history.append((now, workspace.ai[dim].total))
    del history[:-_HISTORY_LIMIT]


def enforced_total(workspace: _Workspace, dim: str, now: float, lag_s: float) -> int:
    """The total the gate enforces at ``now``: the one in force ``lag_s`` ago."""
    history = workspace.total_history.get(dim)
    if not history:
        return workspace.ai[dim].total
    cutoff = now - lag_s
    enforced = history[0][1]
    for since, total in history:
        if since > cutoff:
            break
        enforced = total
    return enforced


def parse_count(body: Any) -> int:
    """``{"count": n}`` with n >= 1; a 400 naming the field otherwise."""
    if body is _INVALID_JSON or not isinstance(body, Mapping):
        raise _bad_request("request body must be a JSON object")
    unknown = set(body) - {"count"}
    if unknown:
        raise _bad_request(f"unknown keys: {', '.join(sorted(unknown))}")
    count = body.get("count")
    if isinstance(count, bool) or not isinstance(count, int):
        raise _bad_request("count must be an integer")
    if count < 1:
        raise _bad_request("count must be at least 1")
    return count


def parse_project_body(body: Any) -> None:
    """``{}`` (or no body); a 400 naming the problem otherwise."""
    if body is None:
        return
    if body is _INVALID_JSON or not isinstance(body, Mapping):
        raise _bad_request("request body must be a JSON object")
    if body:
        raise _bad_request(f"unknown keys: {', '.join(sorted(body))}")


def write_prompts(
    workspace: _Workspace, count: int, *, metered: bool, now: float, lag_s: float
) -> SimResponse:
    """Draft ``count`` prompts; refused when used + drafted + count passes the enforced total.

    A tiered workspace has no drafts and no transfers to lag behind: the write lands as used on
    both tiers, refused whole when either tier would pass its total.
    """
    if workspace.tiered:
        return _write_tiered(workspace, count, metered=metered)
    prompts = workspace.ai["prompts"]
    limit = enforced_total(workspace, "prompts", now, lag_s)
    if metered and prompts.used + prompts.drafted + count > limit:
        return QUOTA_REFUSAL
    prompts.drafted += count
    return SimResponse(200, _answer(workspace, "prompts"))


def publish_prompts(workspace: _Workspace, count: int) -> SimResponse:
    """Move ``count`` drafted prompts to used; no quota check at publish."""
    prompts = workspace.ai["prompts"]
    if prompts.drafted < count:
        raise _bad_request("count exceeds the drafted prompts")
    prompts.drafted -= count
    prompts.used += count
    return SimResponse(200, _answer(workspace, "prompts"))


def discard_drafted_prompts(workspace: _Workspace, count: int) -> SimResponse:
    """Discard ``count`` drafted prompts (a refused request's rollback); never metered."""
    prompts = workspace.ai["prompts"]
    if prompts.drafted < count:
        raise _bad_request("count exceeds the drafted prompts")
    prompts.drafted -= count
    return SimResponse(200, _answer(workspace, "prompts"))


def create_project(
    workspace: _Workspace, *, metered: bool, now: float, lag_s: float
) -> SimResponse:
    """Create one project, refused when ``used + drafted + 1`` passes the enforced total."""
    projects = workspace.ai["projects"]
    limit = enforced_total(workspace, "projects", now, lag_s)
    if metered and projects.used + projects.drafted + 1 > limit:
        return QUOTA_REFUSAL
    projects.used += 1
    return SimResponse(200, _answer(workspace, "projects"))


def delete_prompts(workspace: _Workspace, count: int) -> SimResponse:
    """Delete ``count`` published prompts: they stop counting as used (no quota check)."""
    prompts = workspace.ai["prompts"]
    if prompts.used < count:
        raise _bad_request("count exceeds the published prompts")
    prompts.used -= count
    return SimResponse(200, _answer(workspace, "prompts"))


def delete_project(workspace: _Workspace) -> SimResponse:
    """Delete one project: it stops counting as used."""
    projects = workspace.ai["projects"]
    if projects.used < 1:
        raise _bad_request("the workspace has no project to delete")
    projects.used -= 1
    return SimResponse(200, _answer(workspace, "projects"))


def _write_tiered(workspace: _Workspace, count: int, *, metered: bool) -> SimResponse:
    tiers = [workspace.ai[tier] for tier in PROMPT_TIERS]
    if metered and any(tier.used + count > tier.total for tier in tiers):
        return QUOTA_REFUSAL
    for tier in tiers:
        tier.used += count
    return SimResponse(
        200,
        {
            "workspace_id": workspace.id,
            **{
                tier: {"used": workspace.ai[tier].used, "total": workspace.ai[tier].total}
                for tier in PROMPT_TIERS
            },
        },
    )


def _answer(workspace: _Workspace, dim: str) -> dict[str, Any]:
    return {"workspace_id": workspace.id, dim: workspace.ai[dim].as_dict()}
