"""Bounded inputs: ids in the upstream's alphabet, counts under a maximum, version exactly 1.

The producer and the worker share these rules (the producer builds with the same models), so
each bound is checked on both sides.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from serenity_allocator.adapters.sqs import (
    AllocationProducer,
    build_ensure,
    build_release,
)
from serenity_allocator.domain.messages import (
    MAX_UNITS_PER_DIMENSION,
    StrictTotals,
    cross_field_problem,
    parse_request,
)
from tests.unit.domain.message_rig import ensure_body


def _rejected_fields(body: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as raised:
        parse_request(json.dumps(body))
    return [".".join(str(p) for p in error["loc"][1:]) for error in raised.value.errors()]


@pytest.mark.parametrize(
    "workspace_id",
    [
        "..",
        ".",
        "a.b",
        "child 1",
        "child\x00",
        "child\r\nX-Injected: 1",
        "child\u202e1",
        "é",
        "x" * 129,
        "",
    ],
)
def test_parse_request_rejects_workspace_ids_outside_the_upstream_alphabet(
    workspace_id: str,
) -> None:
    # Given an ensure whose child id could change the URL path or header it lands in
    body = ensure_body(workspace_id=workspace_id)

    # When parsed / Then the worker refuses it, naming the field
    assert _rejected_fields(body) == ["workspace_id"]


def test_parse_request_rejects_a_dot_segment_parent() -> None:
    # Given an ensure whose parent is the '..' segment (httpx would collapse the path)
    body = ensure_body(parent_workspace_id="..")

    # When parsed / Then the parent field is named
    assert _rejected_fields(body) == ["parent_workspace_id"]


def test_parse_request_accepts_the_longest_id_in_the_alphabet() -> None:
    # Given a 128-character id made of every allowed class
    workspace_id = ("Az09-_" * 22)[:128]

    # When parsed
    request = parse_request(json.dumps(ensure_body(workspace_id=workspace_id)))

    # Then it comes through unchanged
    assert request.workspace_id == workspace_id


@pytest.mark.parametrize(
    ("field", "value", "rejected"),
    [
        ("need", {"projects": 0, "prompts": 10**30}, "need.prompts"),
        ("need", {"projects": MAX_UNITS_PER_DIMENSION + 1, "prompts": 0}, "need.projects"),
        ("ceiling", {"projects": 1, "prompts": MAX_UNITS_PER_DIMENSION + 1}, "ceiling.prompts"),
    ],
)
def test_parse_request_rejects_counts_above_the_maximum(
    field: str, value: dict[str, int], rejected: str
) -> None:
    # Given a need or ceiling above the documented per-dimension maximum
    body = ensure_body(**{field: value})

    # When parsed / Then the dimension is named
    assert _rejected_fields(body) == [rejected]


def test_parse_request_accepts_counts_at_the_maximum() -> None:
    # Given a need exactly at the maximum
    body = ensure_body(
        need={"projects": MAX_UNITS_PER_DIMENSION, "prompts": MAX_UNITS_PER_DIMENSION}
    )

    # When parsed / Then it is accepted as sent
    request = parse_request(json.dumps(body))
    assert request.need.as_dict() == {  # type: ignore[union-attr]
        "projects": MAX_UNITS_PER_DIMENSION,
        "prompts": MAX_UNITS_PER_DIMENSION,
    }


def test_parse_request_rejects_a_release_floor_above_the_maximum() -> None:
    # Given a release floor above the maximum
    body = {
        "kind": "release",
        "request_id": "req-2",
        "workspace_id": "child-1",
        "floor": {"projects": 0, "prompts": 10**12},
    }

    # When parsed / Then the floor's dimension is named
    assert _rejected_fields(body) == ["floor.prompts"]


@pytest.mark.parametrize("version", [True, "1", 2, 1.5])
def test_parse_request_accepts_only_the_number_one_as_version(version: object) -> None:
    # Given a body whose version is equal to 1 only loosely (or not at all; 1.0 is 1 in JSON)
    body = ensure_body(version=version)

    # When parsed / Then the version field is named
    assert _rejected_fields(body) == ["version"]


def test_cross_field_problem_names_a_child_that_is_its_own_parent() -> None:
    # Given an ensure naming the master as its own child: schema-valid, so it parses
    request = parse_request(
        json.dumps(ensure_body(workspace_id="master-1", parent_workspace_id="master-1"))
    )

    # When its cross-field rules are checked / Then the parent field is named
    assert cross_field_problem(request, "master-1") == (
        "parent_workspace_id: must differ from workspace_id"
    )


def test_cross_field_problem_names_a_group_that_is_not_the_workspace() -> None:
    # Given a valid ensure sent under another group / When checked / Then the group is named
    request = parse_request(json.dumps(ensure_body()))
    assert cross_field_problem(request, "other") == "MessageGroupId: must equal workspace_id"
    assert cross_field_problem(request, request.workspace_id) is None


@pytest.mark.parametrize("workspace_id", ["..", "a/b", "child\x00"])
def test_build_ensure_rejects_ids_outside_the_upstream_alphabet(workspace_id: str) -> None:
    # Given a service asking for an ensure on an id outside the alphabet
    # When built / Then the producer refuses before sending, naming the field
    with pytest.raises(ValidationError) as raised:
        build_ensure(workspace_id, "master-1", {"projects": 0, "prompts": 10})
    assert [error["loc"] for error in raised.value.errors()] == [("workspace_id",)]


def test_build_ensure_rejects_a_need_above_the_maximum() -> None:
    # Given a need of 10**30 prompts / When built / Then need.prompts is named
    with pytest.raises(ValidationError) as raised:
        build_ensure("child-1", "master-1", {"projects": 0, "prompts": 10**30})
    assert [error["loc"] for error in raised.value.errors()] == [("need", "prompts")]


def test_build_ensure_rejects_the_master_as_its_own_child() -> None:
    # Given the same id as child and parent / When built / Then the parent is named
    with pytest.raises(ValidationError) as raised:
        build_ensure("master-1", "master-1", {"projects": 0, "prompts": 10})
    assert [error["loc"] for error in raised.value.errors()] == [("parent_workspace_id",)]


def test_build_ensure_carries_every_option_into_the_request() -> None:
    # Given every optional part of an ensure / When built / Then each lands in its field
    request = build_ensure(
        "child-1",
        "master-1",
        {"projects": 1, "prompts": 10},
        include_drafted=True,
        ceiling={"projects": 5, "prompts": 500},
        org_id="org-1",
        brand_id="brand-1",
        request_id="req-1",
    )
    assert (request.request_id, request.org_id, request.brand_id) == ("req-1", "org-1", "brand-1")
    assert request.include_drafted is True
    assert request.ceiling is not None
    assert (request.ceiling.projects, request.ceiling.prompts) == (5, 500)
    # Absent, the options take the wire defaults (a fresh request id, drafts counted)
    plain = build_ensure("child-1", "master-1")
    assert (plain.include_drafted, plain.ceiling, plain.org_id, plain.brand_id) == (
        True,
        None,
        None,
        None,
    )
    assert len(plain.request_id) == 36 and plain.request_id != request.request_id


def test_build_ensure_and_enqueue_ensure_refuse_an_unknown_option_by_name() -> None:
    # Given a misspelt option / When built or enqueued / Then it is refused, named, unsent
    with pytest.raises(TypeError, match="unexpected keyword argument 'ceilng'"):
        build_ensure("child-1", "master-1", ceilng={"projects": 1})  # type: ignore[call-arg]
    producer = AllocationProducer("https://sqs.us-east-1.amazonaws.com/1/q.fifo")
    with pytest.raises(TypeError, match="unexpected keyword argument 'ceilng'"):
        producer.enqueue_ensure("child-1", "master-1", ceilng={"projects": 1})  # type: ignore[call-arg]


def test_build_release_and_enqueue_release_refuse_an_unknown_option_by_name() -> None:
    # Given a misspelt option / When built or enqueued / Then it is refused, named, unsent
    with pytest.raises(TypeError, match="unexpected keyword argument 'flor'"):
        build_release("child-1", flor={"projects": 1})  # type: ignore[call-arg]
    producer = AllocationProducer("https://sqs.us-east-1.amazonaws.com/1/q.fifo")
    with pytest.raises(TypeError, match="unexpected keyword argument 'flor'"):
        producer.enqueue_release("child-1", flor={"projects": 1})  # type: ignore[call-arg]


def test_build_release_takes_every_release_option_by_name() -> None:
    # Given every option spelt out / When built / Then each lands in its field
    request = build_release(
        "child-1",
        floor={"projects": 2, "prompts": 300},
        source="sweep",
        run_id="run-1",
        org_id="org-1",
        brand_id="brand-1",
        request_id="req-1",
    )
    assert (
        request.floor,
        request.source,
        request.run_id,
        request.org_id,
        request.brand_id,
        request.request_id,
    ) == (StrictTotals(projects=2, prompts=300), "sweep", "run-1", "org-1", "brand-1", "req-1")
    # and none given: service, no floor, a fresh UUID4
    plain = build_release("child-1")
    assert (plain.floor, plain.source, plain.run_id, len(plain.request_id)) == (
        None,
        "service",
        None,
        36,
    )


def test_build_release_rejects_a_dot_segment_id() -> None:
    # Given a release of '.' / When built / Then workspace_id is named
    with pytest.raises(ValidationError) as raised:
        build_release(".")
    assert [error["loc"] for error in raised.value.errors()] == [("workspace_id",)]
