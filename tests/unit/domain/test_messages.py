"""The allocation request contract (version 1): what parses and what is rejected, and where."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from serenity_allocator.domain.messages import (
    AllocationOutcome,
    EnsureRequest,
    ReleaseRequest,
    parse_request,
)
from tests.unit.domain.message_rig import ensure_body


def _release(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "release", "request_id": "req-2", "workspace_id": "child-1"}
    body.update(overrides)
    return body


def _rejection_locs(body: dict[str, Any]) -> list[tuple[int | str, ...]]:
    with pytest.raises(ValidationError) as raised:
        parse_request(json.dumps(body))
    return [tuple(error["loc"]) for error in raised.value.errors()]


def test_parse_request_valid_ensure() -> None:
    # Given a complete ensure body / When parsed
    request = parse_request(json.dumps(ensure_body(include_drafted=True, brand_id="brand-7")))

    # Then every field comes through typed, with defaults for the rest
    assert isinstance(request, EnsureRequest)
    assert request.workspace_id == "child-1"
    assert request.parent_workspace_id == "master-1"
    assert request.need.as_dict() == {"projects": 1, "prompts": 40}
    assert request.include_drafted is True
    assert request.ceiling is None
    assert request.version == 1


def test_parse_request_valid_release() -> None:
    # Given a minimal release body / When parsed
    request = parse_request(json.dumps(_release()))

    # Then it is a release from the service, with the worker's default floor
    assert isinstance(request, ReleaseRequest)
    assert request.floor is None
    assert request.source == "service"


def test_parse_request_valid_release_with_floor_from_the_sweep() -> None:
    # Given a sweep's release with an explicit floor / When parsed
    request = parse_request(
        json.dumps(_release(floor={"projects": 2, "prompts": 300}, source="sweep", run_id="r-9"))
    )

    # Then the floor and provenance come through
    assert isinstance(request, ReleaseRequest)
    assert request.floor is not None
    assert request.floor.as_dict() == {"projects": 2, "prompts": 300}
    assert (request.source, request.run_id) == ("sweep", "r-9")


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (ensure_body(priority="high"), ("ensure", "priority")),
        (_release(dry_run=True), ("release", "dry_run")),
        (
            ensure_body(need={"projects": 1, "prompts": 2, "weekly_prompts": 3}),
            ("ensure", "need", "weekly_prompts"),
        ),
    ],
)
def test_parse_request_unknown_field_is_rejected_naming_it(
    body: dict[str, Any], loc: tuple[str, ...]
) -> None:
    # Given a body with a field the contract does not know / When parsed
    # Then it is rejected, and the error points at the field
    assert _rejection_locs(body) == [loc]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (ensure_body(need={"projects": 0, "prompts": -1}), ("ensure", "need", "prompts")),
        (ensure_body(ceiling={"projects": -2}), ("ensure", "ceiling", "projects")),
        (_release(floor={"prompts": -100}), ("release", "floor", "prompts")),
    ],
)
def test_parse_request_negative_count_is_rejected_naming_it(
    body: dict[str, Any], loc: tuple[str, ...]
) -> None:
    # Given a negative count / When parsed / Then rejected at that count
    assert _rejection_locs(body) == [loc]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (ensure_body(need={"projects": 1, "prompts": "40"}), ("ensure", "need", "prompts")),
        (ensure_body(need={"projects": 1.5}), ("ensure", "need", "projects")),
        (_release(floor={"prompts": True}), ("release", "floor", "prompts")),
    ],
)
def test_parse_request_non_integer_count_is_rejected_naming_it(
    body: dict[str, Any], loc: tuple[str, ...]
) -> None:
    # Given a count sent as a string (or a fraction, or bool) / When parsed
    # Then rejected: the wire contract does not coerce
    assert _rejection_locs(body) == [loc]


@pytest.mark.parametrize("spelling", ["250", "250.0", "2.5e2", "2.50E+2", "25000e-2"])
def test_parse_request_reads_an_integral_number_as_that_integer(spelling: str) -> None:
    # Given a need spelled as any JSON number equal to 250 (JSON has one number type)
    body = json.dumps(ensure_body(need={"projects": 1, "prompts": 999_999})).replace(
        "999999", spelling
    )

    # When parsed / Then it is the integer 250
    request = parse_request(body)
    assert isinstance(request, EnsureRequest)
    assert (type(request.need.prompts), request.need.prompts) == (int, 250)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (ensure_body(workspace_id=""), ("ensure", "workspace_id")),
        (ensure_body(workspace_id="   "), ("ensure", "workspace_id")),
        (ensure_body(parent_workspace_id=" "), ("ensure", "parent_workspace_id")),
        (_release(request_id=""), ("release", "request_id")),
    ],
)
def test_parse_request_blank_id_is_rejected_naming_it(
    body: dict[str, Any], loc: tuple[str, ...]
) -> None:
    # Given a blank (or whitespace) id / When parsed / Then rejected at that id
    assert _rejection_locs(body) == [loc]


def test_parse_request_missing_id_is_rejected_naming_it() -> None:
    # Given an ensure without its parent / When parsed / Then the missing field is named
    body = ensure_body()
    del body["parent_workspace_id"]
    assert _rejection_locs(body) == [("ensure", "parent_workspace_id")]


@pytest.mark.parametrize("kind", ["grow", "", 1])
def test_parse_request_unknown_kind_is_rejected_naming_it(kind: object) -> None:
    # Given a body whose kind is not one of the contract's / When parsed
    # Then rejected at "kind"
    assert _rejection_locs(_release(kind=kind)) == [("kind",)]


def test_parse_request_missing_kind_is_rejected_naming_it() -> None:
    # Given a body without a kind / When parsed / Then rejected at "kind"
    body = _release()
    del body["kind"]
    assert _rejection_locs(body) == [("kind",)]


def test_parse_request_unknown_version_is_rejected_naming_it() -> None:
    # Given a body from a future contract version / When parsed / Then rejected at "version"
    assert _rejection_locs(_release(version=2)) == [("release", "version")]


def test_allocation_outcome_reads_a_stored_outcome_under_its_former_field_name() -> None:
    # Given an outcome stored (in the ledger) before the receive count was named for what it is
    stored = (
        '{"request_id": "r1", "kind": "ensure", "workspace_id": "c1", "status": "hot-path",'
        ' "attempts": 3}'
    )

    # When it is read back / Then the receive count is carried over, under its new name only
    outcome = AllocationOutcome.model_validate_json(stored)
    assert outcome.receive_count == 3
    assert "attempts" not in outcome.model_dump()


def _refusal(body: str) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        parse_request(body)
    return raised.value


def test_parse_request_refuses_true_as_the_version_saying_it_must_be_the_integer_1() -> None:
    errors = _refusal(json.dumps(_release(version=True))).errors()

    assert [(e["loc"], e["msg"]) for e in errors] == [
        (("release", "version"), "Value error, must be the integer 1")
    ]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{"kind": NaN}', "NaN is not a JSON value"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"kind": ', "Expecting value at line 1 column 10"),
    ],
)
def test_parse_request_refuses_what_is_not_json_as_the_whole_body(body: str, why: str) -> None:
    refusal = _refusal(body)

    assert refusal.title == "AllocationRequest"
    [error] = refusal.errors()
    assert (error["type"], error["loc"], error["input"]) == ("json_invalid", (), body)
    assert error["ctx"] == {"error": why}


def test_parse_request_puts_an_unknown_kind_on_kind_with_its_input_and_title() -> None:
    body = _release(kind="grow")

    refusal = _refusal(json.dumps(body))

    [error] = refusal.errors()
    assert (error["type"], error["loc"], error["input"]) == ("union_tag_invalid", ("kind",), body)
    assert error["ctx"]["tag"] == "grow"
    assert refusal.title.startswith("tagged-union[")
