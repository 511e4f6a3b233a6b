"""The checked-in JSON Schema of message v1 is the pydantic models' schema, and it works."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from serenity_allocator.adapters.sqs_producer import build_ensure, build_release
from serenity_tools.operator.message_schema import SCHEMA_FILE, render_schema


def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


def test_message_schema_checked_in_copy_matches_the_models() -> None:
    # Given the schema generated from the models now / When compared with docs/schemas
    # Then they are identical (regenerate: serenity-allocator message-schema --write)
    assert SCHEMA_FILE.read_text(encoding="utf-8") == render_schema()


def test_message_schema_accepts_what_the_producer_sends() -> None:
    # Given an ensure with a partial ceiling and a release, as the Python producer builds them
    bodies = [
        build_ensure(
            "child-1", "master-1", {"prompts": 250}, include_drafted=True, ceiling={"prompts": 900}
        ).model_dump_json(exclude_none=True),
        build_release("child-1").model_dump_json(exclude_none=True),
    ]

    # When validated against the checked-in schema / Then both are valid
    for body in bodies:
        jsonschema.validate(json.loads(body), _schema())


@pytest.mark.parametrize(
    "body",
    [
        {"version": 1, "kind": "ensure", "request_id": "r", "workspace_id": "c"},
        {"version": 2, "kind": "release", "request_id": "r", "workspace_id": "c"},
        {"kind": "ensure", "request_id": "r", "workspace_id": "c", "parent_workspace_id": "m",
         "need": {"prompts": "250"}},
        {"kind": "release", "request_id": "r", "workspace_id": "c", "surprise": True},
    ],
)  # fmt: skip
def test_message_schema_refuses_what_the_worker_refuses(body: dict[str, Any]) -> None:
    # Given a body the worker would dead-letter / When validated / Then the schema refuses it
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, _schema())
