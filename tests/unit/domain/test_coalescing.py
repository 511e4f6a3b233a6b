"""Coalescing: which ensures of a batch are served by one combined call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from serenity_allocator.domain.coalescing import PlannedMessage, plan_ensure_runs
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest, parse_request
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sizing import Ceiling

MASTER = "master-1"
OTHER_MASTER = "master-2"


def _ensure(
    request_id: str,
    child: str,
    *,
    parent: str = MASTER,
    projects: int = 0,
    prompts: int = 0,
    include_drafted: bool = False,
    ceiling: dict[str, int] | None = None,
) -> EnsureRequest:
    body: dict[str, Any] = {
        "kind": "ensure",
        "request_id": request_id,
        "workspace_id": child,
        "parent_workspace_id": parent,
        "need": {"projects": projects, "prompts": prompts},
        "include_drafted": include_drafted,
    }
    if ceiling is not None:
        body["ceiling"] = ceiling
    request = parse_request(json.dumps(body))
    assert isinstance(request, EnsureRequest)
    return request


def _release(request_id: str, child: str) -> ReleaseRequest:
    request = parse_request(
        json.dumps({"kind": "release", "request_id": request_id, "workspace_id": child})
    )
    assert isinstance(request, ReleaseRequest)
    return request


def _msg(
    message_id: str, request: EnsureRequest | ReleaseRequest | None, group: str | None = None
) -> PlannedMessage:
    group_id = group if group is not None else (request.workspace_id if request else "")
    return PlannedMessage(message_id, group_id, request)


def test_plan_ensure_runs_consecutive_ensures_form_one_run_with_summed_need() -> None:
    # Given three consecutive ensures of one child under one parent
    messages = [
        _msg("m1", _ensure("r1", "c1", projects=1, prompts=100)),
        _msg("m2", _ensure("r2", "c1", prompts=250)),
        _msg("m3", _ensure("r3", "c1", projects=2, prompts=50)),
    ]

    # When planned
    runs = plan_ensure_runs(messages)

    # Then all three share one run, led by the first, needing the sum
    run = runs["m1"]
    assert runs["m2"] is run and runs["m3"] is run
    assert run.members == ["m1", "m2", "m3"]
    assert run.leader == "m1"
    assert run.need == Totals(projects=3, prompts=400)
    assert [r.request_id for r in run.requests] == ["r1", "r2", "r3"]
    assert run.split is False


def test_plan_ensure_runs_single_ensure_is_a_run_of_one() -> None:
    # Given one ensure / When planned
    runs = plan_ensure_runs([_msg("m1", _ensure("r1", "c1", prompts=10))])

    # Then it is a plain ensure: a run with one member and its own need
    assert runs["m1"].members == ["m1"]
    assert runs["m1"].need == Totals(prompts=10)


def test_plan_ensure_runs_include_drafted_when_any_member_asks() -> None:
    # Given a run where only the middle ensure counts drafts
    runs = plan_ensure_runs(
        [
            _msg("m1", _ensure("r1", "c1", prompts=1)),
            _msg("m2", _ensure("r2", "c1", prompts=1, include_drafted=True)),
            _msg("m3", _ensure("r3", "c1", prompts=1)),
        ]
    )

    # When the combined call's flags are read / Then drafts count (the stricter reading)
    assert runs["m1"].include_drafted is True


def test_plan_ensure_runs_include_drafted_false_when_nobody_asks() -> None:
    # Given a run where no member counts drafts / When planned
    runs = plan_ensure_runs(
        [_msg("m1", _ensure("r1", "c1", prompts=1)), _msg("m2", _ensure("r2", "c1", prompts=1))]
    )

    # Then the combined call does not count them either
    assert runs["m1"].include_drafted is False


def test_plan_ensure_runs_ceiling_is_strictest_per_dimension() -> None:
    # Given members with different ceilings (and one without any)
    runs = plan_ensure_runs(
        [
            _msg("m1", _ensure("r1", "c1", ceiling={"projects": 10, "prompts": 800})),
            _msg("m2", _ensure("r2", "c1")),
            _msg("m3", _ensure("r3", "c1", ceiling={"projects": 4, "prompts": 5000})),
        ]
    )

    # When the combined ceiling is read / Then each dimension takes the lowest given
    assert runs["m1"].ceiling == Ceiling(projects=4, prompts=800)


def test_plan_ensure_runs_ceiling_partial_members_leave_other_dimensions_unenforced() -> None:
    # Given one member capping prompts only and another capping nothing enforceable
    runs = plan_ensure_runs(
        [
            _msg("m1", _ensure("r1", "c1", ceiling={"prompts": 800})),
            _msg("m2", _ensure("r2", "c1", ceiling={"projects": 0})),
        ]
    )

    # When the combined ceiling is read / Then projects stays unenforced (never 0)
    assert runs["m1"].ceiling == Ceiling(projects=None, prompts=800)


def test_plan_ensure_runs_ceiling_absent_when_no_member_gives_one() -> None:
    # Given a run without ceilings / When planned
    runs = plan_ensure_runs(
        [_msg("m1", _ensure("r1", "c1")), _msg("m2", _ensure("r2", "c1", prompts=5))]
    )

    # Then the combined call has no ceiling either
    assert runs["m1"].ceiling is None


def test_plan_ensure_runs_release_is_a_barrier() -> None:
    # Given ensure, release, ensure on one child
    runs = plan_ensure_runs(
        [
            _msg("m1", _ensure("r1", "c1", prompts=100)),
            _msg("m2", _release("r2", "c1")),
            _msg("m3", _ensure("r3", "c1", prompts=50)),
        ]
    )

    # When planned / Then the ensures on either side are separate runs; the release has none
    assert runs["m1"] is not runs["m3"]
    assert runs["m1"].members == ["m1"]
    assert runs["m3"].members == ["m3"]
    assert sorted(runs) == ["m1", "m3"]


def test_plan_ensure_runs_invalid_message_is_a_barrier() -> None:
    # Given an invalid message (no parsed request) between two ensures of the same group
    runs = plan_ensure_runs(
        [
            _msg("m1", _ensure("r1", "c1", prompts=100)),
            _msg("m2", None, group="c1"),
            _msg("m3", _ensure("r3", "c1", prompts=50)),
        ]
    )

    # When planned / Then it splits them, as a release would
    assert runs["m1"].members == ["m1"]
    assert runs["m3"].members == ["m3"]
    assert sorted(runs) == ["m1", "m3"]


def test_plan_ensure_runs_different_parent_breaks_run() -> None:
    # Given consecutive ensures of one child naming different parents
    runs = plan_ensure_runs(
        [
            _msg("m1", _ensure("r1", "c1", prompts=100)),
            _msg("m2", _ensure("r2", "c1", prompts=100)),
            _msg("m3", _ensure("r3", "c1", parent=OTHER_MASTER, prompts=100)),
            _msg("m4", _ensure("r4", "c1", parent=OTHER_MASTER, prompts=100)),
        ]
    )

    # When planned / Then a new run starts at the parent change
    assert runs["m1"].members == ["m1", "m2"]
    assert runs["m3"].members == ["m3", "m4"]
    assert runs["m3"].requests[0].parent_workspace_id == OTHER_MASTER


def test_plan_ensure_runs_interleaved_groups_plan_independently() -> None:
    # Given two children's messages interleaved in the batch, with a release on c2 only
    runs = plan_ensure_runs(
        [
            _msg("a1", _ensure("ra1", "c1", prompts=100)),
            _msg("b1", _ensure("rb1", "c2", prompts=10)),
            _msg("a2", _ensure("ra2", "c1", prompts=200)),
            _msg("b2", _release("rb2", "c2")),
            _msg("a3", _ensure("ra3", "c1", prompts=300)),
            _msg("b3", _ensure("rb3", "c2", prompts=30)),
        ]
    )

    # When planned
    # Then c1's ensures are one run (another group's messages are no barrier) ...
    assert runs["a1"].members == ["a1", "a2", "a3"]
    assert runs["a1"].need == Totals(prompts=600)
    # ... and c2's release splits only c2's ensures
    assert runs["b1"].members == ["b1"]
    assert runs["b3"].members == ["b3"]
    assert runs["b1"] is not runs["a1"]


def test_plan_ensure_runs_only_ensures_are_planned() -> None:
    # Given a batch of releases only / When planned / Then there is nothing to coalesce
    assert (
        plan_ensure_runs([_msg("m1", _release("r1", "c1")), _msg("m2", _release("r2", "c2"))]) == {}
    )


def test_a_member_that_leaves_no_longer_counts_and_stands_alone() -> None:
    # Given a run of three ensures (IMS mode: the second one's user cannot read the child)
    requests = [_ensure(f"r{n}", "c1", prompts=100 * n) for n in (1, 2, 3)]
    runs = plan_ensure_runs([PlannedMessage(f"m{n}", "c1", r) for n, r in enumerate(requests, 1)])
    run = runs["m1"]

    # When it leaves
    run.leave("m2")

    # Then the run sums the other two and no longer serves it; the leader cannot leave
    assert run.need == Totals(projects=0, prompts=400)
    assert (run.includes("m1"), run.includes("m2"), run.includes("m3")) == (True, False, True)
    assert run.combined
    for not_behind in ("m1", "m2"):  # the leader, and a member that already left
        with pytest.raises(ValueError, match=r"^only a member behind the leader can leave a run$"):
            run.leave(not_behind)
    run.leave("m3")
    assert not run.combined
