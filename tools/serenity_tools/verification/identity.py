"""The identity invariant: every request ran under its own user, and only for members.

Under IMS (docs/credentials.md) the worker acts with the requesting user's access token,
exchanged from that request's promise token. The simulator names the user of every call made
with an IMS bearer (``"user"`` in ``/__dump`` calls), so a run can check, after the fact:

- every Allocator call (``read_resources``, ``status``, ``transfer``, ``family``) was made with
  a user's token, never a fleet-wide one;
- each call belongs to a request in flight on that workspace (its child, or its pool) whose
  user made it: the consumers' traces give each batch's window and request ids. A successful
  transfer is attributed exactly: to the request whose outcome reports the totals it set, the
  first in child order when ensures coalesced (the leader, whose token the combined transfer
  uses). Calls of another actor (the sweep, under its operator) are attributed to its window;
- no transfer was applied for a user who is not a member of the child, and no request was
  applied (its totals moved) for a user who is not a member of its child.

:func:`check_user_tokens` returns an :class:`.invariants.InvariantResult` and never raises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serenity_allocator.domain.messages import AllocationOutcome, EnsureRequest, ReleaseRequest
from serenity_tools.verification.invariants import (
    DIMENSIONS,
    InvariantResult,
    in_child_order,
    invariant_result,
    workspace_dim,
)

Request = EnsureRequest | ReleaseRequest
Workspaces = Mapping[str, Mapping[str, Any]]
NAME = "7 own user's token, members only"
WORKER_OPS = frozenset({"read_resources", "status", "transfer", "family"})
"""The Allocator's and the Sweep's Semrush operations (the services' write gate is theirs)."""


@dataclass(frozen=True)
class ActorWindow:
    """Another actor's calls: ``user`` between ``start`` and ``end`` (monotonic seconds)."""

    user: str
    start: float
    end: float
    label: str = "sweep"


@dataclass(frozen=True)
class IdentityRecord:
    """Who each request belongs to, who is a member of what, and the other actors' windows."""

    owners: Mapping[str, str]
    """Request id -> the user whose credential it was enqueued with."""
    memberships: Mapping[str, frozenset[str]]
    """User -> the workspaces it is a member of."""
    actors: Sequence[ActorWindow] = field(default=())


@dataclass(frozen=True)
class _Window:
    start: float
    end: float
    request_ids: frozenset[str]


def batch_windows(
    events: Iterable[Mapping[str, Any]], visibility_timeout_s: float
) -> list[_Window]:
    """Each batch's span, from its receive request to its release (a crash: the timeout)."""
    opened: dict[tuple[Any, Any], Mapping[str, Any]] = {}
    windows: list[_Window] = []
    for event in sorted(events, key=lambda e: float(e.get("t", 0.0))):
        key = (event.get("pid"), event.get("batch"))
        if event.get("ev") == "receive":
            opened[key] = event
        elif event.get("ev") == "release" and key in opened:
            received = opened.pop(key)
            windows.append(_window(received, float(event.get("t_done", event["t"]))))
    for received in opened.values():
        windows.append(_window(received, float(received["t"]) + visibility_timeout_s))
    return windows


def _window(received: Mapping[str, Any], end: float) -> _Window:
    rids = frozenset(
        str(m["request_id"]) for m in received.get("msgs", []) if m.get("request_id") is not None
    )
    return _Window(float(received.get("t_req", received["t"])), end, rids)


class _Attribution:
    """Maps a call to the requests (and actors) that may have made it."""

    def __init__(
        self,
        requests: Sequence[Request],
        identity: IdentityRecord,
        windows: Sequence[_Window],
        before: Workspaces,
        *,
        siblings: bool,
    ) -> None:
        self.by_id = {r.request_id: r for r in requests}
        self.identity = identity
        self.windows = windows
        self._parents = {wid: w.get("parent_id") for wid, w in before.items()}
        self._children: dict[str, set[str]] = defaultdict(set)
        for wid, parent in self._parents.items():
            if parent:
                self._children[str(parent)].add(wid)
        self._siblings = siblings

    def scope(self, request: Request) -> set[str]:
        """What a request may call: its child and its pool.

        With sibling reclaim on, the pool's other children too (a parked ensure reads them).
        """
        pool = (
            request.parent_workspace_id
            if isinstance(request, EnsureRequest)
            else self._parents.get(request.workspace_id)
        )
        scope = {request.workspace_id}
        if pool:
            scope.add(str(pool))
            if self._siblings:
                scope |= self._children[str(pool)]
        return scope

    def in_flight(self, workspace_id: str, at: float) -> list[str]:
        """Requests in a batch at ``at`` whose scope holds ``workspace_id``."""
        found: list[str] = []
        for window in self.windows:
            if not window.start <= at <= window.end:
                continue
            for rid in sorted(window.request_ids):
                request = self.by_id.get(rid)
                if request is not None and workspace_id in self.scope(request):
                    found.append(rid)
        return found

    def actor_at(self, user: str, at: float) -> ActorWindow | None:
        return next(
            (a for a in self.identity.actors if a.user == user and a.start <= at <= a.end), None
        )

    def owner(self, request_id: str) -> str | None:
        return self.identity.owners.get(request_id)


def check_user_tokens(
    calls: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    requests: Sequence[Request],
    outcomes: Iterable[AllocationOutcome],
    before: Workspaces,
    identity: IdentityRecord,
    *,
    visibility_timeout_s: float,
    siblings: bool = False,
) -> InvariantResult:
    """7. Every upstream call of a request under its own user's token; members only.

    Args:
        calls: The simulator's call log (``/__dump`` calls).
        events: The consumers' trace events.
        requests: Every request enqueued.
        outcomes: The outcome events.
        before: The workspaces at the start (each child's totals before its first transfer).
        identity: Owners, memberships and other actors' windows.
        visibility_timeout_s: How long a crashed batch may still have made calls.
        siblings: Sibling reclaim is on (a request may read its pool's other children).
    """
    worker_calls = sorted(
        (c for c in calls if c.get("op") in WORKER_OPS), key=lambda c: int(c.get("seq", 0))
    )
    windows = batch_windows(events, visibility_timeout_s)
    attribution = _Attribution(requests, identity, windows, before, siblings=siblings)
    leaders = _transfer_leaders(worker_calls, outcomes, before, attribution)
    violations: list[str] = []
    for call in worker_calls:
        violations += _call_violations(call, attribution, leaders.get(int(call.get("seq", 0))))
    applied = _applied_requests(outcomes, attribution.by_id)
    violations += _non_member_applied(applied, attribution)
    users = {str(c["user"]) for c in worker_calls if c.get("user")}
    return invariant_result(
        NAME,
        violations,
        f"{len(worker_calls)} calls by {len(users)} users, each its own request's "
        f"({len(leaders)} transfers to their leaders); {len(applied)} applied requests, "
        "all by members",
    )


def _call_violations(
    call: Mapping[str, Any], attribution: _Attribution, leader: str | None
) -> list[str]:
    op, workspace, at = call.get("op"), str(call.get("workspace_id")), float(call.get("t", 0.0))
    user = call.get("user")
    where = f"{op} {workspace} (call #{call.get('seq')})"
    if not user:
        return [f"{where}: made without a user's token"]
    user = str(user)
    violations = _membership(call, user, attribution)
    if leader is not None:
        owner = attribution.owner(leader)
        if owner != user:
            violations.append(f"{where}: under {user}'s token, its leader {leader} is {owner}'s")
        return violations
    if attribution.actor_at(user, at) is not None:
        return violations
    candidates = attribution.in_flight(workspace, at)
    if not candidates:
        return [*violations, f"{where}: under {user}'s token, no request of it in flight"]
    owners = {attribution.owner(rid) for rid in candidates}
    if user not in owners:
        shown = ", ".join(f"{rid} ({attribution.owner(rid)})" for rid in candidates[:3])
        violations.append(f"{where}: under {user}'s token while in flight: {shown}")
    return violations


def _membership(call: Mapping[str, Any], user: str, attribution: _Attribution) -> list[str]:
    if call.get("op") != "transfer" or call.get("status") != 200:
        return []
    workspace = str(call.get("workspace_id"))
    if workspace in attribution.identity.memberships.get(user, frozenset()):
        return []
    return [f"transfer {workspace} (call #{call.get('seq')}) applied for {user}, not a member"]


def _transfer_leaders(
    calls: Sequence[Mapping[str, Any]],
    outcomes: Iterable[AllocationOutcome],
    before: Workspaces,
    attribution: _Attribution,
) -> dict[int, str]:
    """Call seq -> the request whose outcome reports the totals that transfer set (its leader)."""
    reporting = _reporting(outcomes)
    state: dict[str, dict[str, int]] = {}
    leaders: dict[int, str] = {}
    for call in calls:
        if call.get("op") != "transfer" or call.get("status") != 200:
            continue
        child = str(call.get("workspace_id"))
        totals = state.setdefault(
            child, {dim: workspace_dim(before.get(child, {}), dim, "total") for dim in DIMENSIONS}
        )
        totals.update(_sent(call))
        in_flight = set(attribution.in_flight(child, float(call.get("t", 0.0))))
        key = (child, (totals["projects"], totals["prompts"]))
        # The first in child order of the in-flight requests reporting these totals led it.
        leader = next((rid for rid in reporting.get(key, []) if rid in in_flight), None)
        if leader is not None:
            leaders[int(call.get("seq", 0))] = leader
    return leaders


def _reporting(
    outcomes: Iterable[AllocationOutcome],
) -> dict[tuple[str, tuple[int, int]], list[str]]:
    """(child, totals after) -> the requests whose outcome moved the child there, in order."""
    reporting: dict[tuple[str, tuple[int, int]], list[str]] = defaultdict(list)
    for outcome in in_child_order(outcomes):
        after = outcome.totals_after
        if after is not None and outcome.totals_before != after:
            reporting[(outcome.workspace_id, (after.projects, after.prompts))].append(
                outcome.request_id
            )
    return reporting


def _sent(call: Mapping[str, Any]) -> dict[str, int]:
    sent = ((call.get("body") or {}).get("resources") or {}).get("ai") or {}
    return {d: sent[d] for d in DIMENSIONS if isinstance(sent.get(d), int) and sent[d] != 0}


def _applied_requests(
    outcomes: Iterable[AllocationOutcome], by_id: Mapping[str, Request]
) -> list[AllocationOutcome]:
    return [
        o
        for o in in_child_order(outcomes)
        if o.request_id in by_id
        and o.totals_after is not None
        and o.totals_before != o.totals_after
    ]


def _non_member_applied(
    applied: Sequence[AllocationOutcome], attribution: _Attribution
) -> list[str]:
    violations: list[str] = []
    for outcome in applied:
        owner = attribution.owner(outcome.request_id)
        if owner is None:
            continue  # not a user's request (a worker-enqueued sibling release)
        members = attribution.identity.memberships.get(owner, frozenset())
        if outcome.workspace_id not in members:
            violations.append(
                f"{outcome.request_id} applied on {outcome.workspace_id} for {owner}, not a member"
            )
    return violations
