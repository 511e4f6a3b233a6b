"""events/: every SQS event is a valid Lambda SQS FIFO event carrying the message contract.

Each file works with ``sam local invoke <Function> -e events/<file>.json`` and with
``serenity-allocator invoke``; the malformed one is malformed in exactly the three ways the
worker must survive.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aws_lambda_powertools.utilities.parser.models import SqsModel
from pydantic import ValidationError

from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest, parse_request
from serenity_allocator.domain.sweep.model import SweepRequest
from serenity_allocator.handlers.sweep import parse_sweep_payload
from tests.infrastructure._template import EVENTS_DIR, load_template

SQS_EVENTS = sorted(p for p in EVENTS_DIR.glob("*.json") if "Records" in json.loads(p.read_text()))
SWEEP_EVENTS = sorted(EVENTS_DIR.glob("sweep-*.json"))
MALFORMED = EVENTS_DIR / "malformed-message.json"
VALID_SQS_EVENTS = [p for p in SQS_EVENTS if p != MALFORMED]


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_events_directory_has_the_documented_files() -> None:
    assert {p.name for p in EVENTS_DIR.glob("*.json")} == {
        "ensure-one.json",
        "ensure-coalescing-batch.json",
        "mixed-batch-two-children.json",
        "malformed-message.json",
        "sweep-dry-run.json",
        "sweep-real.json",
        "sweep-resume.json",
        "sweep-abandon.json",
        "env.json",
    }


@pytest.mark.parametrize("path", SQS_EVENTS, ids=_ids(SQS_EVENTS))
def test_sqs_event_parses_with_powertools_sqs_model(path: Path) -> None:
    # Given an event file / When Powertools parses it / Then every record is a FIFO record
    event = SqsModel.model_validate(_load(path))
    assert event.Records
    for record in event.Records:
        assert record.eventSource == "aws:sqs"
        assert record.eventSourceARN.endswith(".fifo")
        assert record.attributes.MessageGroupId
        assert record.attributes.MessageDeduplicationId
        assert record.attributes.SequenceNumber
        assert record.md5OfBody == hashlib.md5(record.body.encode()).hexdigest()


@pytest.mark.parametrize("path", SQS_EVENTS, ids=_ids(SQS_EVENTS))
def test_sqs_event_is_in_fifo_order(path: Path) -> None:
    records = _load(path)["Records"]
    sequence = [int(r["attributes"]["SequenceNumber"]) for r in records]
    assert sequence == sorted(sequence) and len(set(sequence)) == len(sequence)
    assert len({r["messageId"] for r in records}) == len(records)
    assert len(records) <= 10  # the template's BatchSize


@pytest.mark.parametrize("path", VALID_SQS_EVENTS, ids=_ids(VALID_SQS_EVENTS))
def test_valid_message_is_grouped_by_its_child_and_deduplicated_by_its_request(
    path: Path,
) -> None:
    for record in _load(path)["Records"]:
        # Given a record / When its body is parsed with the message contract
        message = parse_request(record["body"])
        # Then the producer rules hold: group = workspace, dedup id = request id
        assert record["attributes"]["MessageGroupId"] == message.workspace_id
        assert record["attributes"]["MessageDeduplicationId"] == message.request_id


def _messages(name: str) -> list[EnsureRequest | ReleaseRequest]:
    return [parse_request(r["body"]) for r in _load(EVENTS_DIR / name)["Records"]]


def test_ensure_one_is_a_single_ensure() -> None:
    (message,) = _messages("ensure-one.json")
    assert isinstance(message, EnsureRequest)
    assert message.parent_workspace_id == "ws-master-org1"


def test_coalescing_batch_is_consecutive_ensures_for_one_child() -> None:
    messages = _messages("ensure-coalescing-batch.json")
    assert len(messages) == 3
    assert all(isinstance(m, EnsureRequest) for m in messages)
    assert {m.workspace_id for m in messages} == {"ws-child-a1"}
    assert len({m.request_id for m in messages}) == 3


def test_mixed_batch_has_two_children_with_a_release_between_ensures() -> None:
    messages = _messages("mixed-batch-two-children.json")
    assert {m.workspace_id for m in messages} == {"ws-child-a1", "ws-child-b2"}
    kinds_a1 = [m.kind for m in messages if m.workspace_id == "ws-child-a1"]
    assert kinds_a1 == ["ensure", "release", "ensure"]


def _problem(record: dict[str, Any]) -> str | None:
    try:
        json.loads(record["body"])
    except json.JSONDecodeError:
        return "bad-json"
    try:
        message = parse_request(record["body"])
    except ValidationError:
        return "schema"
    if record["attributes"]["MessageGroupId"] != message.workspace_id:
        return "group-mismatch"
    return None


def test_malformed_event_holds_one_of_each_invalid_message() -> None:
    # Given the malformed event's records / Then each is invalid, one way each
    problems = [_problem(record) for record in _load(MALFORMED)["Records"]]
    assert problems == ["bad-json", "schema", "group-mismatch"]


# ---------------------------------------------------------------- sweep payloads


@pytest.mark.parametrize("path", SWEEP_EVENTS, ids=_ids(SWEEP_EVENTS))
def test_sweep_event_validates_against_the_sweep_payload_model(path: Path) -> None:
    request = parse_sweep_payload(_load(path))
    if isinstance(request, SweepRequest):
        assert request.parent_workspace_ids == ["ws-master-org1"]
    else:  # the abandon payload names the run it ends
        assert request.run_id == _load(EVENTS_DIR / "sweep-resume.json")["run_id"]


def test_sweep_events_cover_dry_run_real_run_and_resume() -> None:
    dry, real, resume = (
        _load(EVENTS_DIR / name)
        for name in ("sweep-dry-run.json", "sweep-real.json", "sweep-resume.json")
    )
    assert dry["dry_run"] is True and "run_id" not in dry
    assert real["dry_run"] is False and "run_id" not in real
    assert resume["dry_run"] is False and resume["run_id"].startswith("rs-")
    # A resume repeats the run's payload; only the run id is added.
    assert {k: v for k, v in resume.items() if k != "run_id"} == real


# ---------------------------------------------------------------- env.json


def test_env_json_is_sam_env_vars_for_the_local_stack() -> None:
    # Given env.json
    env = _load(EVENTS_DIR / "env.json")
    functions = {
        name
        for name, resource in load_template()["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    # Then it is SAM's format: sections per function or "Parameters", string values only
    assert set(env) <= functions | {"Parameters"}
    assert all(isinstance(v, str) for section in env.values() for v in section.values())
    # And it points at the local simulator with a token that is accepted only on loopback
    merged = {**env["Parameters"], **env.get("AllocatorFunction", {})}
    host = urlsplit(merged["SEMRUSH_BASE_URL"]).hostname or ""
    assert ipaddress.ip_address(host).is_loopback
    assert merged["SEMRUSH_TOKEN"] == "local-dev-token"
    # And it runs in local static-token mode: the template's IMS settings are blanked (a
    # blank value is an absent one), so the token is the only credential
    assert (merged["IMS_HOST"], merged["IMS_CONSUMER_SECRET_ID"]) == ("", "")
    assert env["SweepFunction"]["IMS_EMITTER_SECRET_ID"] == ""
    assert merged["SERENITY_DYNAMIC_ALLOCATION"] == "true"
    # And every AWS endpoint it names is local too (a local run never reaches AWS)
    for name, value in merged.items():
        if value.startswith("http"):
            assert ipaddress.ip_address(urlsplit(value).hostname or "").is_loopback, name
