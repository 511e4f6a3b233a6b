"""``serenity-allocator local redrive`` against a moto server over real HTTP."""

from __future__ import annotations

import json

import pytest

from serenity_allocator.adapters.sqs import DeadLetterSender
from serenity_tools.cli import main
from serenity_tools.standins.local_redrive import fresh_deduplication_id
from serenity_tools.standins.resources import LocalResources, local_client
from tests.integration.moto_helpers import drain_queue


def _ensure(request_id: str, child: str) -> str:
    return json.dumps(
        {
            "version": 1,
            "kind": "ensure",
            "request_id": request_id,
            "workspace_id": child,
            "parent_workspace_id": "m1",
            "need": {"projects": 0, "prompts": 250},
        }
    )


def test_a_hand_redrive_under_the_request_id_is_dropped_by_the_deduplication_window(
    local_resources: LocalResources,
) -> None:
    # Given a request sent and consumed (its deduplication id is the request id)
    sqs = local_client("sqs", local_resources.endpoint_url)
    body = _ensure("req-window", "c1")
    send = {"QueueUrl": local_resources.queue_url, "MessageBody": body, "MessageGroupId": "c1"}
    sqs.send_message(**send, MessageDeduplicationId="req-window")
    assert [m["Body"] for m in drain_queue(local_resources.queue_url)] == [body]

    # When the same body is sent again under the same id (a naive hand redrive)
    sqs.send_message(**send, MessageDeduplicationId="req-window")

    # Then the queue accepted and discarded it: nothing arrives
    assert drain_queue(local_resources.queue_url) == []


def test_local_redrive_moves_exhausted_and_credential_letters_back_with_new_ids(
    local_resources: LocalResources, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a letter moved by the redrive policy after its request was consumed under its id,
    sqs = local_client("sqs", local_resources.endpoint_url)
    exhausted = _ensure("req-exhausted", "c1")
    for url in (local_resources.queue_url, local_resources.dlq_url):
        sqs.send_message(
            QueueUrl=url,
            MessageBody=exhausted,
            MessageGroupId="c1",
            MessageDeduplicationId="req-exhausted",
        )
    drain_queue(local_resources.queue_url)
    # a refused credential's letter and an invalid message, both sent by the worker
    sender = DeadLetterSender(local_resources.dlq_url)
    refused = _ensure("req-no-record", "c2")
    sender.send_invalid(
        refused,
        reason="noCredential",
        group_id="c2",
        dedup_id="req-no-record",
        source_message_id="m-2",
    )
    sender.send_invalid(
        '{"kind": "ensure"}',
        reason="1 validation error: request_id missing",
        group_id="invalid",
        dedup_id="x",
        source_message_id="m-3",
    )

    # When the local DLQ is redriven (the URLs as `local up` prints them)
    code = main(
        [
            "local",
            "redrive",
            "--dlq-url",
            local_resources.dlq_url,
            "--queue-url",
            local_resources.queue_url,
        ]
    )

    # Then both requests are back on the queue, bodies and groups unchanged, under new ids
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["request_id"], r["group_id"]) for r in report["redriven"]] == [
        ("req-exhausted", "c1"),
        ("req-no-record", "c2"),
    ]
    back = drain_queue(local_resources.queue_url, attribute_names=True)
    assert sorted(m["Body"] for m in back) == sorted([exhausted, refused])
    dedup_ids = {
        m["Attributes"]["MessageGroupId"]: m["Attributes"]["MessageDeduplicationId"] for m in back
    }
    assert dedup_ids == {r["group_id"]: r["deduplication_id"] for r in report["redriven"]}
    assert dedup_ids["c1"].startswith("req-exhausted-redrive-")
    assert dedup_ids["c2"].startswith("req-no-record-redrive-")
    # And the invalid message stays in the DLQ, visible again, named with its reason
    assert report["left_invalid"] == [
        {
            "message_id": report["left_invalid"][0]["message_id"],
            "reason": "1 validation error: request_id missing",
        }
    ]
    assert [m["Body"] for m in drain_queue(local_resources.dlq_url)] == ['{"kind": "ensure"}']


def test_local_redrive_without_the_urls_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a shell without local up's export lines
    for name in ("DLQ_URL", "QUEUE_URL", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS"):
        monkeypatch.delenv(name, raising=False)

    # When a redrive is asked for / Then it refuses, naming the options and variables
    assert main(["local", "redrive"]) == 2
    err = capsys.readouterr().err
    assert "--dlq-url and --queue-url (or DLQ_URL and QUEUE_URL)" in err
    assert "AWS_ENDPOINT_URL" in err


def test_a_fresh_deduplication_id_fits_sqs_for_the_longest_request_id() -> None:
    # Given the longest request id the contract allows (128 characters)
    longest = "r" * 128

    # Then each fresh id is new, at most 128 printable characters, and names its request
    first, second = fresh_deduplication_id(longest), fresh_deduplication_id(longest)
    assert first != second
    assert len(first) <= 128 and first.isprintable() and " " not in first
    assert first.startswith("r" * 95 + "-redrive-")
    assert fresh_deduplication_id(None).startswith("message-redrive-")
