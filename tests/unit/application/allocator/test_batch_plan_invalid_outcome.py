"""Planning a batch: the ``invalid`` outcome of a refused body whose request id can be read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from serenity_allocator.application.allocator.invocation import InboundMessage, read_message

GOOD: dict[str, Any] = {
    "version": 1,
    "kind": "ensure",
    "request_id": "req-x",
    "workspace_id": "c1",
    "parent_workspace_id": "ws-master",
    "need": {"projects": 0, "prompts": -1},
}
"""An ensure refused for its negative need, every other field valid."""


def _read(body: object, *, group_id: str = "c1", receive_count: int = 3) -> Any:
    inbound = InboundMessage("m1", group_id, json.dumps(body), receive_count=receive_count)
    return read_message(inbound)


def test_a_refused_body_with_a_readable_id_gets_an_invalid_outcome_of_its_own() -> None:
    # Given a refused ensure whose ids and kind are valid, under another group / When read /
    # Then its outcome says which request, kind and workspace (the body's), on which receive
    message = _read(GOOD, group_id="grp-1")
    assert message.request is None
    assert message.invalid_reason == "need.prompts: Input should be greater than or equal to 0"
    outcome = message.invalid_outcome
    assert outcome is not None
    assert (outcome.request_id, outcome.kind, outcome.workspace_id) == ("req-x", "ensure", "c1")
    assert (outcome.status, outcome.error_code) == ("invalid", "invalidMessage")
    assert (outcome.receive_count, outcome.dead_lettered) == (3, True)


@pytest.mark.parametrize(("kind", "told"), [("release", "release"), ("other", "unknown")])
def test_the_invalid_outcome_carries_the_bodys_kind_only_when_it_is_one(
    kind: str, told: str
) -> None:
    # Given a refused body of that kind / When read / Then its kind, or unknown
    outcome = _read({**GOOD, "kind": kind}).invalid_outcome
    assert outcome is not None and outcome.kind == told


@pytest.mark.parametrize("workspace_id", ["a/b", 7, None, "x" * 129])
def test_the_invalid_outcome_names_the_group_when_the_workspace_id_is_not_one(
    workspace_id: object,
) -> None:
    # Given a refused body whose workspace id breaks the contract / When read / Then the
    # outcome names the record's group instead
    outcome = _read({**GOOD, "workspace_id": workspace_id}, group_id="grp-1").invalid_outcome
    assert outcome is not None and outcome.workspace_id == "grp-1"


@pytest.mark.parametrize(
    "body",
    [
        ["not", "an", "object"],
        {**GOOD, "request_id": None},
        {**GOOD, "request_id": 12},
        {**GOOD, "request_id": "has space"},
        {**GOOD, "request_id": "id\n"},
        {**GOOD, "request_id": ""},
    ],
    ids=["list", "none", "number", "space", "newline", "empty"],
)
def test_a_refused_body_without_a_readable_request_id_gets_no_outcome(body: object) -> None:
    # Given a refused body whose request id cannot be read / When read / Then no outcome:
    # nobody waits on an id that is not one
    message = _read(body)
    assert message.request is None and message.invalid_outcome is None


def test_the_id_patterns_are_matched_whole() -> None:
    # Given ids that hold a valid id with an anchor character around it / When read / Then
    # they are not ids (the patterns are matched whole, without their anchors)
    for request_id in ("^req", "req$"):
        outcome = _read({**GOOD, "request_id": request_id}).invalid_outcome
        assert outcome is not None and outcome.request_id == request_id
    outcome = _read({**GOOD, "workspace_id": "c1$"}, group_id="grp-1").invalid_outcome
    assert outcome is not None and outcome.workspace_id == "grp-1"


def test_a_body_that_is_no_object_is_refused_naming_the_body() -> None:
    # Given a JSON list as the body / When read / Then the reason names the body as a whole
    message = _read(["not", "an", "object"])
    assert message.invalid_reason == (
        "body: Input should be a valid dictionary or object to extract fields from"
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {
                "version": 1,
                "kind": "release",
                "request_id": "r",
                "workspace_id": "c1",
                "floor": {"prompts": -1},
            },
            "floor.prompts: Input should be greater than or equal to 0",
        ),
        (
            {**GOOD, "need": {"prompts": -1}},
            "need.prompts: Input should be greater than or equal to 0",
        ),
    ],
    ids=["release", "ensure"],
)
def test_a_refused_field_is_named_without_the_kinds_tag(body: object, reason: str) -> None:
    # Given a refused release or ensure / When read / Then the field's path leaves out the
    # discriminator's tag (``release.``, ``ensure.``)
    assert _read(body).invalid_reason == reason
