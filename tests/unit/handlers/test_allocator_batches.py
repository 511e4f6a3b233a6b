"""The Allocator Lambda in memory: kill switch, invalid messages, item failures, unmetered."""

from __future__ import annotations

from typing import Any

import pytest

from serenity_allocator.domain.model import Totals
from tests.fakes import LIST_FAMILY, READ_RESOURCES, sqs_record
from tests.unit.handlers.allocator_rig import (
    FULL,
    MASTER,
    ensure_record,
    failed_ids,
    family_gateway,
    metric_total,
    new_worker,
    read_emf,
    release_record,
)

# ==== kill switch ===========================================================================


def test_lambda_handler_kill_switch_off_ensure_is_a_noop_but_release_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the kill switch off, a short child and a child with surplus
    worker = new_worker(
        family_gateway(("c1", FULL, FULL), ("c2", Totals(projects=1, prompts=900), FULL)),
        SERENITY_DYNAMIC_ALLOCATION="false",
    )

    # When an ensure for c1 and a release for c2 arrive
    response = worker.invoke(ensure_record("m1", "c1", 500), release_record("m2", "c2"))

    # Then the ensure made zero calls and completed as disabled; the release still ran
    assert {workspace for _, workspace in worker.gateway.calls} == {"c2"}  # never c1
    assert worker.gateway.transfers == [("c2", FULL)]
    assert failed_ids(response) == []
    assert worker.outcome("req-m1").status == "disabled"
    assert worker.outcome("req-m2").status == "released"
    _, data = read_emf(capsys)
    assert metric_total(data, "DisabledNoop") == 1


def test_lambda_handler_kill_switch_off_makes_zero_gateway_calls_for_ensures() -> None:
    # Given the kill switch off / When a batch of ensures arrives
    worker = new_worker(family_gateway(("c1", FULL, FULL)), SERENITY_DYNAMIC_ALLOCATION="True")
    worker.invoke(ensure_record("m1", "c1", 500), ensure_record("m2", "c1", 500))

    # Then Semrush was never called
    assert worker.gateway.calls == []


# ==== invalid messages ======================================================================


def _invalid_records() -> list[tuple[dict[str, Any], str]]:
    """(record, a field its dead-letter reason must name)."""
    good: dict[str, Any] = {
        "version": 1,
        "kind": "ensure",
        "request_id": "req-x",
        "workspace_id": "c1",
        "parent_workspace_id": MASTER,
        "need": {"projects": 0, "prompts": 100},
    }
    return [
        (sqs_record("{not json", message_id="bad-json", group_id="c1"), "not valid JSON"),
        (
            sqs_record(
                {**good, "need": {"projects": 0, "prompts": -1}},
                message_id="negative",
                group_id="c1",
            ),
            "need.prompts",
        ),
        (
            sqs_record({**good, "need": {"prompts": "100"}}, message_id="string", group_id="c1"),
            "need.prompts",
        ),
        (sqs_record({**good, "colour": "red"}, message_id="unknown", group_id="c1"), "colour"),
        (
            sqs_record(
                {k: v for k, v in good.items() if k != "kind"}, message_id="kindless", group_id="c1"
            ),
            "kind",
        ),
        (sqs_record(good, message_id="wrong-group", group_id="c2"), "MessageGroupId"),
    ]


def test_lambda_handler_invalid_messages_go_to_the_dlq_and_complete(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a batch of invalid messages of every kind
    worker = new_worker(family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL)))
    cases = _invalid_records()

    # When the batch arrives
    response = worker.invoke(*(record for record, _ in cases))

    # Then none reached Semrush; each went to the DLQ with a reason naming the field; all done
    assert worker.gateway.calls == []
    assert failed_ids(response) == []
    assert worker.dead_letters is not None
    sent = {letter.source_message_id: letter for letter in worker.dead_letters.sent}
    for record, named in cases:
        letter = sent[record["messageId"]]
        assert named in letter.reason, (record["messageId"], letter.reason)
        assert letter.body == record["body"]
        assert letter.group_id == record["attributes"]["MessageGroupId"]
    # And every body whose request id can be read (all but the one that is not JSON) is
    # announced as invalid and dead-lettered, so its caller's wait ends
    assert worker.outcomes is not None
    assert [
        (o.request_id, o.status, o.error_code, o.dead_lettered) for o in worker.outcomes.published
    ] == [("req-x", "invalid", "invalidMessage", True)] * (len(cases) - 1)
    _, data = read_emf(capsys)
    assert metric_total(data, "InvalidMessage") == len(cases)


def test_lambda_handler_invalid_messages_without_dlq_are_item_failures() -> None:
    # Given no DLQ configured, an invalid message, and a valid one for another child (with
    # room and two projects to spare)
    worker = new_worker(
        family_gateway(("c1", FULL, FULL), ("c3", Totals(projects=3, prompts=500), FULL)), dlq=False
    )
    invalid = [record for record, _ in _invalid_records()[:2]]

    # When the batch arrives
    response = worker.invoke(invalid[0], ensure_record("ok", "c3", 100), invalid[1])

    # Then the invalid ones fail (nothing is dropped) and never reach Semrush; the valid completes
    assert failed_ids(response) == ["bad-json", "negative"]
    assert worker.gateway.calls == [(READ_RESOURCES, "c3")]
    assert worker.outcome("req-ok").status == "hot-path"


# ==== batch item failures ===================================================================


def test_lambda_handler_failed_group_holds_back_only_its_own_messages() -> None:
    # Given c1 busy and c2 fine, their messages interleaved
    worker = new_worker(family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL), ("c3", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the batch arrives
    response = worker.invoke(
        ensure_record("a1", "c1", 100),
        ensure_record("b1", "c2", 100),
        release_record("a2", "c1"),
        release_record("b2", "c2"),
        ensure_record("c-1", "c3", 100),
    )

    # Then exactly c1's messages fail; c2's later messages and c3 still succeed
    assert response == {"batchItemFailures": [{"itemIdentifier": "a1"}, {"itemIdentifier": "a2"}]}
    assert [worker.outcome(r).status for r in ("req-b1", "req-b2", "req-c-1")] == [
        "topped-up",
        "released",
        "topped-up",
    ]
    assert worker.outcomes is not None
    assert sorted(worker.outcomes.by_request()) == ["req-b1", "req-b2", "req-c-1"]


def test_lambda_handler_every_record_busy_returns_all_failures_instead_of_raising() -> None:
    # Given two busy children
    worker = new_worker(family_gateway(("c1", FULL, FULL), ("c2", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)
    worker.gateway.script_not_ready("c2", 10)

    # When a batch where every record fails arrives
    response = worker.invoke(ensure_record("m1", "c1", 100), ensure_record("m2", "c2", 100))

    # Then it is a partial response listing both, not a function error
    assert failed_ids(response) == ["m1", "m2"]


def test_lambda_handler_release_busy_fails_the_item(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a child with surplus that stays busy through the settle policy's retries
    worker = new_worker(family_gateway(("c1", Totals(projects=1, prompts=900), FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When a release arrives / Then it is retried later (never dropped)
    assert failed_ids(worker.invoke(release_record("m1", "c1"))) == ["m1"]
    assert worker.gateway.totals_of("c1") == Totals(projects=1, prompts=900)

    # ... and the stuck child counts toward the busy alarm, as an ensure's would
    _, data = read_emf(capsys)
    assert metric_total(data, "AllocationRejection", "workspaceBusy") == 1
    assert metric_total(data, "ReleaseOutcome", "error") == 1


# ==== unmetered parents =====================================================================


def test_lambda_handler_unmetered_parent_completes_without_transfer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a parent whose ai product does not meter (limits_enabled: false)
    worker = new_worker(family_gateway(("c1", FULL, FULL), limits_enabled=False))

    # When a short child asks for more
    response = worker.invoke(ensure_record("m1", "c1", 500))

    # Then nothing was carved: outcome unmetered, zero transfers, no pool read
    assert worker.gateway.transfers == []
    assert worker.gateway.calls == [(READ_RESOURCES, "c1"), (LIST_FAMILY, MASTER)]
    assert failed_ids(response) == []
    assert worker.outcome("req-m1").status == "unmetered"
    _, data = read_emf(capsys)
    assert metric_total(data, "HeadroomCheck", "unmetered") == 1


def test_lambda_handler_unmetered_check_off_carves_as_before() -> None:
    # Given the same unmetered parent with the check switched off
    worker = new_worker(
        family_gateway(("c1", FULL, FULL), limits_enabled=False), SERENITY_UNMETERED_CHECK="false"
    )

    # When a short child asks for more / Then it is topped up as usual
    worker.invoke(ensure_record("m1", "c1", 100))
    assert worker.outcome("req-m1").status == "topped-up"
    # (the one family listing is the parent check, made whatever the metering switch says)
    assert worker.gateway.calls_of(LIST_FAMILY) == ["ws-master"]
