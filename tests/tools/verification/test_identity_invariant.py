"""The identity invariant: each call under its own request's user, applied for members only."""

from __future__ import annotations

from typing import Any

from serenity_allocator.adapters.sqs import build_ensure, build_release
from serenity_allocator.domain.messages import AllocationOutcome
from serenity_allocator.domain.model import Totals
from serenity_tools.verification.identity import (
    NAME,
    ActorWindow,
    IdentityRecord,
    check_user_tokens,
)
from serenity_tools.verification.invariants import InvariantResult

BEFORE: dict[str, dict[str, Any]] = {
    "org": {"id": "org", "parent_id": None, "ai": {}},
    "c1": {
        "id": "c1",
        "parent_id": "org",
        "ai": {"projects": {"used": 1, "total": 1}, "prompts": {"used": 100, "total": 100}},
    },
    "c2": {
        "id": "c2",
        "parent_id": "org",
        "ai": {"projects": {"used": 1, "total": 1}, "prompts": {"used": 100, "total": 100}},
    },
}
MEMBERS = {
    "u1": frozenset({"org", "c1"}),
    "u2": frozenset({"org", "c2"}),
    "u3": frozenset({"org", "c1"}),
    "operator": frozenset({"org", "c1", "c2"}),
}
E1 = build_ensure("c1", "org", {"prompts": 50}, request_id="e1")
E2 = build_ensure("c2", "org", {"prompts": 50}, request_id="e2")
E3 = build_ensure("c1", "org", {"prompts": 20}, request_id="e3")


def _call(seq: int, op: str, workspace: str, user: str | None, t: float) -> dict[str, Any]:
    call: dict[str, Any] = {"op": op, "workspace_id": workspace, "status": 200, "seq": seq, "t": t}
    if user is not None:
        call["user"] = user
    return call


def _transfer(seq: int, workspace: str, prompts: int, user: str | None, t: float) -> dict[str, Any]:
    call = _call(seq, "transfer", workspace, user, t)
    call["body"] = {"resources": {"ai": {"projects": 1, "prompts": prompts}}}
    return call


def _batch(batch: int, request_ids: list[str], start: float, end: float) -> list[dict[str, Any]]:
    msgs = [{"id": f"m-{rid}", "group": "g", "request_id": rid} for rid in request_ids]
    return [
        {"ev": "receive", "pid": 1, "batch": batch, "t": start, "t_req": start, "msgs": msgs},
        {"ev": "release", "pid": 1, "batch": batch, "t": end, "t_done": end},
    ]


def _topped_up(
    rid: str, child: str, prompts: int, seq: int, coalesced: int = 1
) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=rid,
        kind="ensure",
        workspace_id=child,
        status="topped-up",
        totals_before=Totals(projects=1, prompts=100),
        totals_after=Totals(projects=1, prompts=prompts),
        coalesced=coalesced,
        sequence_number=str(seq),
    )


def _denied(rid: str, child: str, seq: int) -> AllocationOutcome:
    return AllocationOutcome(
        request_id=rid,
        kind="ensure",
        workspace_id=child,
        status="rejected",
        error_code="accessDenied",
        sequence_number=str(seq),
    )


def _check(
    calls: list[dict[str, Any]],
    events: list[dict[str, Any]],
    outcomes: list[AllocationOutcome],
    owners: dict[str, str],
    requests: tuple[Any, ...] = (E1, E2),
    actors: tuple[ActorWindow, ...] = (),
) -> InvariantResult:
    return check_user_tokens(
        calls,
        events,
        list(requests),
        outcomes,
        BEFORE,
        IdentityRecord(owners, MEMBERS, actors),
        visibility_timeout_s=30.0,
    )


def test_each_request_calling_under_its_own_users_token_passes() -> None:
    # Given two users' ensures in one batch, each read and topped up under its own token
    calls = [
        _call(1, "read_resources", "c1", "u1", 1.1),
        _call(2, "read_resources", "org", "u1", 1.2),
        _transfer(3, "c1", 200, "u1", 1.3),
        _call(4, "read_resources", "c2", "u2", 1.4),
        _transfer(5, "c2", 200, "u2", 1.5),
    ]
    outcomes = [_topped_up("e1", "c1", 200, 1), _topped_up("e2", "c2", 200, 2)]

    result = _check(calls, _batch(1, ["e1", "e2"], 1.0, 2.0), outcomes, {"e1": "u1", "e2": "u2"})

    # Then the invariant holds and says what it covered
    assert result.passed, result.detail
    assert result.name == NAME
    assert result.detail == (
        "5 calls by 2 users, each its own request's (2 transfers to their leaders); "
        "2 applied requests, all by members"
    )


def test_a_call_under_another_users_token_is_a_violation() -> None:
    # Given the second request's read made with the first request's token (a holder not rebound)
    calls = [
        _call(1, "read_resources", "c1", "u1", 1.1),
        _call(2, "read_resources", "c2", "u1", 1.4),
    ]

    result = _check(calls, _batch(1, ["e1", "e2"], 1.0, 2.0), [], {"e1": "u1", "e2": "u2"})

    # Then it is named, with the request that was in flight
    assert not result.passed
    assert result.violations == (
        "read_resources c2 (call #2): under u1's token while in flight: e2 (u2)",
    )


def test_a_call_without_a_users_token_is_a_violation() -> None:
    # Given a read made with the static bearer (the simulator names no user)
    result = _check(
        [_call(1, "read_resources", "c1", None, 1.1)],
        _batch(1, ["e1"], 1.0, 2.0),
        [],
        {"e1": "u1"},
    )

    assert result.violations == ("read_resources c1 (call #1): made without a user's token",)


def test_a_call_outside_every_batch_of_its_workspace_is_a_violation() -> None:
    # Given a read of c2 while only c1's request was in flight
    result = _check(
        [_call(1, "read_resources", "c2", "u2", 1.5)],
        _batch(1, ["e1"], 1.0, 2.0),
        [],
        {"e1": "u1", "e2": "u2"},
    )

    assert result.violations == (
        "read_resources c2 (call #1): under u2's token, no request of it in flight",
    )


def test_a_transfer_for_a_non_member_is_a_violation() -> None:
    # Given u2 (a member of c2 only) asked for c1, and its top-up was applied anyway
    calls = [_call(1, "read_resources", "c1", "u2", 1.1), _transfer(2, "c1", 200, "u2", 1.2)]
    requests = (build_ensure("c1", "org", {"prompts": 50}, request_id="x1"),)

    result = _check(
        calls,
        _batch(1, ["x1"], 1.0, 2.0),
        [_topped_up("x1", "c1", 200, 1)],
        {"x1": "u2"},
        requests=requests,
    )

    # Then both the transfer and the applied request are violations
    assert not result.passed
    assert result.violations == (
        "transfer c1 (call #2) applied for u2, not a member",
        "x1 applied on c1 for u2, not a member",
    )


def test_an_access_denied_request_with_nothing_applied_passes() -> None:
    # Given u2's ensure on c1: its read was refused (403) and nothing was transferred
    refused = _call(1, "read_resources", "c1", "u2", 1.1)
    refused["status"] = 403
    requests = (build_ensure("c1", "org", {"prompts": 50}, request_id="x1"),)

    result = _check(
        [refused], _batch(1, ["x1"], 1.0, 2.0), [_denied("x1", "c1", 1)], {"x1": "u2"}, requests
    )

    assert result.passed, result.detail


def test_a_coalesced_transfer_is_attributed_to_its_leader() -> None:
    # Given two users' ensures on c1 coalesced into one top-up (e1 leads, e3 joins)
    events = _batch(1, ["e1", "e3"], 1.0, 2.0)
    outcomes = [_topped_up("e1", "c1", 200, 1, coalesced=2), _topped_up("e3", "c1", 200, 2, 2)]
    owners = {"e1": "u1", "e3": "u3"}
    joined = [
        _call(1, "read_resources", "c1", "u3", 1.1),
        _call(2, "read_resources", "c1", "u1", 1.2),
    ]

    # When the combined transfer is made with the leader's token, it passes
    led = _check([*joined, _transfer(3, "c1", 200, "u1", 1.3)], events, outcomes, owners, (E1, E3))
    assert led.passed, led.detail
    # And made with the member's token, it is a violation naming the leader
    member = _check(
        [*joined, _transfer(3, "c1", 200, "u3", 1.3)], events, outcomes, owners, (E1, E3)
    )
    assert member.violations == ("transfer c1 (call #3): under u3's token, its leader e1 is u1's",)


def test_the_sweeps_calls_under_its_operator_are_attributed_to_its_window() -> None:
    # Given the sweep's reads under the operator's token, and a later stray one
    calls = [
        _call(1, "family", "org", "operator", 5.1),
        _call(2, "status", "c1", "operator", 5.2),
        _call(3, "status", "c2", "operator", 9.5),
    ]

    result = _check(calls, [], [], {}, actors=(ActorWindow("operator", 5.0, 6.0),))

    # Then only the call outside the sweep's window is a violation
    assert result.violations == (
        "status c2 (call #3): under operator's token, no request of it in flight",
    )


def test_a_release_may_read_its_pool_under_its_own_token() -> None:
    # Given a release (it names no pool) whose pool read happens under its user's token
    release = build_release("c1", request_id="r1")
    calls = [
        _call(1, "read_resources", "c1", "u1", 1.1),
        _call(2, "read_resources", "org", "u1", 1.2),
    ]

    result = _check(calls, _batch(1, ["r1"], 1.0, 2.0), [], {"r1": "u1"}, (release,))

    assert result.passed, result.detail
