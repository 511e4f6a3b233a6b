"""The checked-in contract (JSON Schemas, AsyncAPI, corpus) is the models', and the worker
accepts exactly what the message schema accepts (the Node tests check the same corpus with ajv).
"""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from jsonschema.validators import extend

from serenity_allocator.adapters.sqs import build_ensure, build_release
from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import (
    AllocationOutcome,
    cross_field_problem,
    parse_request,
    read_json,
)
from serenity_tools.operator.message_corpus import message_bodies
from serenity_tools.operator.message_schema import (
    ASYNCAPI_FILE,
    CORPUS_FILE,
    LEDGER_SCHEMA_FILE,
    OUTCOME_SCHEMA_FILE,
    SCHEMA_FILE,
    rendered_files,
)

_SCHEMAS = [SCHEMA_FILE, OUTCOME_SCHEMA_FILE, LEDGER_SCHEMA_FILE]


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _ecma_pattern(validator: Any, pattern: str, instance: object, schema: dict[str, Any]) -> Any:
    # JSON Schema patterns are ECMA-262: "$" ends the string. Python's re lets "$" match before
    # a final newline ("id\n" would pass), so the anchor is made strict here.
    if isinstance(instance, str) and not re.search(re.sub(r"\$$", r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = extend(jsonschema.Draft202012Validator, {"pattern": _ecma_pattern})


def _message_validator() -> Any:
    return _Validator(_load(SCHEMA_FILE))


@pytest.mark.parametrize("path", [*_SCHEMAS, ASYNCAPI_FILE], ids=lambda p: p.name)
def test_contract_checked_in_copy_matches_the_models(path: Path) -> None:
    # Given every contract file generated from the models now / When compared with docs
    # Then they are identical (regenerate: serenity-allocator message-schema --write)
    assert path.read_text(encoding="utf-8") == rendered_files()[path]


@pytest.mark.parametrize("path", _SCHEMAS, ids=lambda p: p.name)
def test_contract_schemas_are_valid_draft_2020_12_without_openapi_keywords(path: Path) -> None:
    # Given a checked-in schema / When checked against the 2020-12 meta-schema / Then it is
    # valid, and it carries no keyword ajv's strict mode refuses (pydantic's discriminator)
    schema = _load(path)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "discriminator" not in path.read_text(encoding="utf-8")


def test_asyncapi_references_the_checked_in_schemas() -> None:
    # Given the AsyncAPI document / When its payload references are resolved from docs/
    payloads = _load(ASYNCAPI_FILE)["components"]["messages"]
    refs = {name: message["payload"]["schema"]["$ref"] for name, message in payloads.items()}

    # Then the queue carries message v1 and the bus the outcome, both files that exist
    assert refs == {
        "request": "schemas/allocation-request-v1.schema.json",
        "outcome": "schemas/allocation-outcome-v1.schema.json",
    }
    assert all((ASYNCAPI_FILE.parent / ref).is_file() for ref in refs.values())


def test_asyncapi_references_resolve_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a process whose working directory is elsewhere (docs/local-stack.md: resolve the
    # relative $refs against the document's own location, not the working directory)
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    monkeypatch.chdir(tmp_path)
    base = ASYNCAPI_FILE.resolve().as_uri()

    def retrieve(uri: str) -> Resource:
        assert uri.startswith("file://"), uri
        return Resource.from_contents(
            json.loads(Path(uri.removeprefix("file://")).read_text(encoding="utf-8")),
            default_specification=DRAFT202012,
        )

    resolver = Registry(retrieve=retrieve).resolver(base_uri=base)
    payloads = _load(ASYNCAPI_FILE)["components"]["messages"]

    # When each payload's $ref is resolved against the document's URI
    resolved = {
        name: resolver.lookup(message["payload"]["schema"]["$ref"]).contents
        for name, message in payloads.items()
    }

    # Then each is the schema with its own $id, and the request schema validates an ensure
    assert {name: schema["$id"] for name, schema in resolved.items()} == {
        "request": "https://serenity-allocator.local/schemas/allocation-request-v1.schema.json",
        "outcome": "https://serenity-allocator.local/schemas/allocation-outcome-v1.schema.json",
    }
    ensure = build_ensure("child-1", "master-1", {"prompts": 250}).model_dump(exclude_none=True)
    jsonschema.Draft202012Validator(resolved["request"]).validate(ensure)


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
        _message_validator().validate(json.loads(body))


def test_message_schema_says_drafts_are_counted_by_default() -> None:
    # Given the ensure's schema / When its include_drafted is read / Then it defaults to true
    ensure = _load(SCHEMA_FILE)["$defs"]["EnsureRequest"]["properties"]
    assert ensure["include_drafted"]["default"] is True
    assert ensure["request_id"]["pattern"] == "^[!-~]{1,128}$"


def test_outcome_and_ledger_schemas_accept_what_the_worker_stores() -> None:
    # Given an outcome as published (exclude_none) and a ledger record holding it
    outcome = AllocationOutcome(
        request_id="r-1", kind="ensure", workspace_id="c-1", status="invalid",
        error_code="invalidMessage", receive_count=1, dead_lettered=True,
    )  # fmt: skip
    detail = json.loads(outcome.model_dump_json(exclude_none=True))
    record = json.loads(
        LedgerEntry(
            request_id="r-1", state="deadLettered", outcome=outcome, updated_at=5
        ).model_dump_json(exclude_none=True)
    )

    # When validated / Then both are valid, and a record with an unknown state is not
    _Validator(_load(OUTCOME_SCHEMA_FILE)).validate(detail)
    _Validator(_load(LEDGER_SCHEMA_FILE)).validate(record)
    with pytest.raises(jsonschema.ValidationError):
        _Validator(_load(LEDGER_SCHEMA_FILE)).validate({**record, "state": "done"})


def _corpus() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = _load(CORPUS_FILE)
    return loaded


def test_corpus_covers_every_category_with_over_a_thousand_bodies() -> None:
    # Given the checked-in corpus / When counted per category
    corpus = _corpus()
    categories = collections.Counter(entry["category"] for entry in corpus)

    # Then it is large, distinct, and holds accepted, refused and cross-field bodies
    assert len(corpus) >= 1000
    assert len({entry["body"] for entry in corpus}) == len(corpus)
    assert len(categories) == 17
    assert {entry["accepted"] for entry in corpus} == {True, False}
    assert any(entry["cross_field"] for entry in corpus)


def _worker_verdict(body: str) -> tuple[bool, str | None]:
    try:
        request = parse_request(body)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return False, None
    return True, cross_field_problem(request, request.workspace_id)


def _schema_verdict(body: str) -> bool:
    try:
        instance = read_json(body)
    except ValueError:
        return False
    return bool(_message_validator().is_valid(instance))


def test_worker_parser_and_schema_agree_on_every_corpus_body() -> None:
    # Given every corpus body / When the worker's parser and the schema (jsonschema, ECMA
    # anchors) judge it
    disagreements = [
        entry["body"]
        for entry in _corpus()
        if _worker_verdict(entry["body"]) != (entry["accepted"], entry["cross_field"])
        or _schema_verdict(entry["body"]) != entry["accepted"]
    ]

    # Then both give the recorded verdict on every body (ajv does too: clients/node tests)
    assert disagreements == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=message_bodies())
def test_worker_parser_and_schema_agree_on_fresh_hypothesis_bodies(body: str) -> None:
    # Given a body drawn now by the corpus's own strategy (not only the checked-in ones)
    # When the worker's parser and the schema judge it / Then they agree
    assert _worker_verdict(body)[0] is _schema_verdict(body)
