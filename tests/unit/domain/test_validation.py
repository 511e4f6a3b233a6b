"""One error formatter for every input: field paths and messages, never the values."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from serenity_allocator.domain.messages import describe_validation_error, parse_request


class _Nested(BaseModel):
    count: int


class _Document(BaseModel):
    name: str
    nested: _Nested


def _error(call: object) -> ValidationError:
    assert callable(call)
    with pytest.raises(ValidationError) as raised:
        call()
    return raised.value


def test_describe_validation_error_names_every_field_and_never_the_value() -> None:
    # Given a document with two wrong fields, one of them holding a secret-looking value
    error = _error(lambda: _Document.model_validate({"nested": {"count": "tok-secret"}}))

    # When described / Then each field path is named with its message, the value nowhere
    assert describe_validation_error(error) == (
        "name: Field required; "
        "nested.count: Input should be a valid integer, unable to parse string as an integer"
    )


def test_describe_validation_error_names_the_whole_input_for_a_root_problem() -> None:
    # Given input that is not an object at all / When described with the input's name
    error = _error(lambda: _Document.model_validate(["not", "an", "object"]))

    # Then the problem is put on the input itself
    assert describe_validation_error(error, whole="environment") == (
        "environment: Input should be a valid dictionary or instance of _Document"
    )


def test_describe_validation_error_reports_invalid_json_alone() -> None:
    # Given a body that is not JSON / When described as the message body
    error = _error(lambda: parse_request("{oops"))

    # Then one clear line says so
    assert describe_validation_error(error, whole="body", skip=("ensure", "release")) == (
        "body: not valid JSON (Invalid JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2)"
    )


def test_describe_validation_error_drops_the_union_tag_from_the_path() -> None:
    # Given an ensure whose need is not an object
    body = (
        '{"version": 1, "kind": "ensure", "request_id": "r1", "workspace_id": "c1",'
        ' "parent_workspace_id": "m1", "need": 5}'
    )
    error = _error(lambda: parse_request(body))

    # When described without the tag / Then the path starts at the field
    described = describe_validation_error(error, whole="body", skip=("ensure", "release"))
    assert described.startswith("need: ")
    assert "ensure." not in described


@pytest.mark.parametrize("run_id", [".", "..", " .. "])
def test_a_dot_segment_run_id_is_a_validation_error_naming_the_field(run_id: str) -> None:
    # Given a sweep run id that would be a directory step in its checkpoint's key
    from serenity_allocator.domain.sweep.model import SweepAbandonRequest, SweepRequest

    # When a sweep or an abandon names it / Then pydantic refuses it, naming run_id
    for model, payload in (
        (SweepRequest, {"parent_workspace_ids": ["ws-master"], "run_id": run_id}),
        (SweepAbandonRequest, {"abandon": True, "run_id": run_id}),
    ):
        error = _error(lambda m=model, p=payload: m.model_validate(p))
        assert describe_validation_error(error) == "run_id: Value error, must not be '.' or '..'"
