"""The requests a run carried: the services' own, plus the releases the worker enqueued itself."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from serenity_allocator.adapters.sqs import build_release
from serenity_allocator.domain.messages import AllocationOutcome, ReleaseRequest
from serenity_tools.verification.harness.workload import Request

WORKER_RELEASE_PREFIX = "reclaim-"
"""Request ids of the releases the worker enqueues itself for sibling reclaim."""


def first_deliveries(events: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per message group, request ids in the order the broker first delivered them."""
    order: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for event in events:
        if event.get("ev") != "receive":
            continue
        for message in event.get("msgs", []):
            rid = message.get("request_id")
            if isinstance(rid, str) and rid not in seen:
                seen.add(rid)
                order[str(message.get("group"))].append(rid)
    return order


def regroup_by_child(
    events: Sequence[dict[str, Any]], requests: Sequence[Request]
) -> list[dict[str, Any]]:
    """The trace with each known message's group set to the child its request names.

    On a standard queue SQS carries no MessageGroupId, so the trace records none; the broker
    checks then ask the question that matters there: was a CHILD held by two containers at
    once, and were its requests delivered in enqueue order.
    """
    child_of = {request.request_id: request.workspace_id for request in requests}
    regrouped: list[dict[str, Any]] = []
    for event in events:
        if event.get("ev") != "receive":
            regrouped.append(event)
            continue
        msgs = [
            {**m, "group": child_of.get(m.get("request_id") or "", m.get("group"))}
            for m in event.get("msgs", [])
        ]
        groups: dict[str, list[str]] = defaultdict(list)
        for message in msgs:
            groups[str(message["group"])].append(str(message["id"]))
        regrouped.append({**event, "msgs": msgs, "groups": dict(groups)})
    return regrouped


def with_worker_releases(
    requests: Sequence[Request],
    events: Sequence[Mapping[str, Any]],
    outcomes: Sequence[AllocationOutcome],
) -> list[Request]:
    """The services' requests plus the releases the worker enqueued itself (sibling reclaim).

    The worker's releases have no producer-side record; each is placed in its child's order
    where the broker first delivered it (the only record of its enqueue position). For them,
    invariant 4 therefore checks application order against delivery order; the broker checks
    vouch for delivery order on the services' requests.
    """
    known = {request.request_id for request in requests}
    # A refused body whose request id is readable is answered ``invalid`` under that id: a
    # poison message, never a release of the worker's.
    extra_source = {
        o.request_id: o for o in outcomes if o.request_id not in known and o.status != "invalid"
    }
    per_child: dict[str, list[Request]] = defaultdict(list)
    for request in requests:
        per_child[request.workspace_id].append(request)
    delivered = first_deliveries(events)
    merged: list[Request] = []
    for child in [*per_child, *(g for g in delivered if g not in per_child)]:
        merged += _merge_child(
            child, per_child.get(child, []), delivered.get(child, []), known, extra_source
        )
    return merged


def _merge_child(
    child: str,
    own: Sequence[Request],
    delivered: Sequence[str],
    known: set[str],
    extra_source: Mapping[str, AllocationOutcome],
) -> list[Request]:
    """One child's requests, its worker releases placed where the broker delivered them."""
    position = {request.request_id: index for index, request in enumerate(own)}
    merged: list[Request] = []
    taken = 0
    for rid in delivered:
        if rid in position:
            merged.extend(own[taken : position[rid] + 1])
            taken = max(taken, position[rid] + 1)
        elif rid not in known and _is_worker_release(rid, extra_source):
            outcome = extra_source.get(rid)
            source = outcome.source if outcome and outcome.source else "reclaim"
            merged.append(build_release(child, source=source, request_id=rid))
    merged.extend(own[taken:])
    return merged


def _is_worker_release(rid: str, extra_source: Mapping[str, AllocationOutcome]) -> bool:
    # The worker's own id scheme (its reclaim request ids), or an outcome other than
    # ``invalid``: a poison body may carry a request id too, but it never gets either.
    return rid.startswith(WORKER_RELEASE_PREFIX) or rid in extra_source


def reclaimed_children(requests: Sequence[Request]) -> set[str]:
    """Children that received a release from sibling reclaim during the run."""
    return {
        r.workspace_id for r in requests if isinstance(r, ReleaseRequest) and r.source == "reclaim"
    }
