"""The worker's use cases honour their configuration and carry each request's identity.

Through the Allocator handler, on in-memory fakes: configured blocks size top-ups, releases
and the default release floor; the environment's ceiling backstop caps a top-up; an outcome
carries the request's labels; a final receive's outcome is marked dead-lettered; invalid
parents and records go to the DLQ with their reason; duplicates are applied once; sibling
reclaim parks within its bounds; an unannounced outcome holds back its group only; log lines
carry their record's ids. The batch plan is called directly where the handler's edge hides a
case.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from serenity_allocator.adapters.observability import logger
from serenity_allocator.application.allocator.invocation import InboundMessage, plan_batch
from serenity_allocator.domain.messages import AllocationOutcome, ReleaseRequest
from serenity_allocator.domain.model import Totals
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.lambda_context import LocalLambdaContext
from tests.fakes import (
    FakeClock,
    InMemoryGateway,
    RecordingDeadLetters,
    RecordingEnqueuer,
    RecordingOutcomes,
    sqs_event,
    sqs_record,
)

MASTER = "ws-master"
MAX_RECEIVE_COUNT = 5
ENV = {
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "tok-unit-never-used",
    "ENVIRONMENT": "unit",
    "MAX_RECEIVE_COUNT": str(MAX_RECEIVE_COUNT),
    "SERENITY_DYNAMIC_ALLOCATION": "true",
}
WIDE_BLOCKS = {"BLOCK_PROJECTS": "2", "BLOCK_PROMPTS": "250"}
"""Not the defaults (1 project, 100 prompts): a rule that ignored them would size by 100."""


@dataclass
class Rig:
    """One container on fakes: its gateway, its published outcomes, one invoke per call."""

    gateway: InMemoryGateway
    outcomes: RecordingOutcomes
    dead_letters: RecordingDeadLetters
    producer: RecordingEnqueuer
    runtime: AllocatorRuntime
    clock: FakeClock

    def invoke(self, *records: dict[str, Any]) -> list[str]:
        """Hand the records to the handler; return the failed message ids."""
        context = LocalLambdaContext("serenity-allocator-unit", 60.0, self.clock)
        response = lambda_handler(sqs_event(*records), context, runtime=self.runtime)
        return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]

    def outcome(self, request_id: str) -> AllocationOutcome:
        return self.outcomes.by_request()[request_id]


def _rig(
    gateway: InMemoryGateway,
    env: Mapping[str, str] | None = None,
    *,
    publish: bool = True,
    failing_publish_calls: Sequence[int] = (),
) -> Rig:
    clock = FakeClock()
    outcomes = RecordingOutcomes(fail_calls=failing_publish_calls)
    dead_letters = RecordingDeadLetters()
    producer = RecordingEnqueuer()
    runtime = AllocatorRuntime(
        settings=AllocatorSettings.from_env({**ENV, **(env or {})}),
        gateway=gateway,
        dead_letters=dead_letters,
        outcomes=outcomes if publish else None,
        producer=producer,
        clock=clock,
        sleep=clock.sleep,
    )
    return Rig(gateway, outcomes, dead_letters, producer, runtime, clock)


def _family(
    *children: tuple[str, Totals, Totals],
    pool: Totals = Totals(projects=50, prompts=10_000),  # noqa: B008 - frozen value
) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=pool)
    for child_id, total, used in children:
        gateway.add_child(child_id, MASTER, total=total, used=used)
    return gateway


def _record(body: dict[str, Any], *, receive_count: int = 1) -> dict[str, Any]:
    message_id = f"m-{body['request_id']}"
    return sqs_record(
        {"version": 1, **body},
        message_id=message_id,
        group_id=body["workspace_id"],
        receive_count=receive_count,
        dedup_id=body["request_id"],
    )


def _received(record: dict[str, Any], receive_count: int) -> dict[str, Any]:
    attributes = {**record["attributes"], "ApproximateReceiveCount": str(receive_count)}
    return {**record, "attributes": attributes}


def _ensure(request_id: str, child: str, prompts: int, **fields: str | bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "ensure",
        "request_id": request_id,
        "workspace_id": child,
        "parent_workspace_id": MASTER,
        "need": {"projects": 0, "prompts": prompts},
        **fields,
    }
    return _record(body)


def _release(
    request_id: str, child: str, *, receive_count: int = 1, **fields: str
) -> dict[str, Any]:
    body = {"kind": "release", "request_id": request_id, "workspace_id": child, **fields}
    return _record(body, receive_count=receive_count)


def _release_with_floor(request_id: str, child: str, floor: Totals) -> dict[str, Any]:
    body = {
        "kind": "release",
        "request_id": request_id,
        "workspace_id": child,
        "floor": floor.as_dict(),
    }
    return _record(body)


# ==== configured blocks =====================================================================


def test_worker_tops_up_in_the_configured_blocks() -> None:
    # Given 250-prompt blocks and a child using all of its 100 prompts
    rig = _rig(
        _family(("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100))),
        WIDE_BLOCKS,
    )

    # When one more prompt is ensured
    assert rig.invoke(_ensure("r1", "c1", 1)) == []

    # Then prompts rise to 101 plus four 250-blocks (1,101), not 101 plus four blocks of 100,
    # and projects (2-blocks, none to spare) are refilled ahead by four blocks, to 1 + 8 = 9,
    # in the same call
    assert rig.gateway.transfers == [("c1", Totals(projects=9, prompts=1_101))]
    assert rig.outcome("r1").totals_after == Totals(projects=9, prompts=1_101)


def test_worker_releases_to_the_configured_blocks_and_their_default_floor() -> None:
    # Given 2-project, 250-prompt blocks; one child using 260 of 1000 prompts, one idle child
    rig = _rig(
        _family(
            ("busy", Totals(projects=5, prompts=1_000), Totals(projects=1, prompts=260)),
            ("idle", Totals(projects=5, prompts=1_000), Totals()),
        ),
        WIDE_BLOCKS,
    )

    # When both are released with no floor in the message
    assert rig.invoke(_release("r1", "busy"), _release("r2", "idle")) == []

    # Then usage rounds up to 250-blocks (500) and the floor is one block each (2, 250)
    assert rig.gateway.transfers == [
        ("busy", Totals(projects=2, prompts=500)),
        ("idle", Totals(projects=2, prompts=250)),
    ]
    assert [
        (o.status, o.totals_before, o.totals_after) for o in (rig.outcome("r1"), rig.outcome("r2"))
    ] == [
        ("released", Totals(projects=5, prompts=1_000), Totals(projects=2, prompts=500)),
        ("released", Totals(projects=5, prompts=1_000), Totals(projects=2, prompts=250)),
    ]


def test_worker_release_with_nothing_to_give_reports_the_totals_it_kept() -> None:
    # Given a child at exactly one block, using it
    rig = _rig(_family(("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100))))

    # When released
    assert rig.invoke(_release("r1", "c1")) == []

    # Then nothing moves and the outcome says what the child holds, before and after
    outcome = rig.outcome("r1")
    assert (outcome.status, outcome.totals_before, outcome.totals_after) == (
        "nothing-to-release",
        Totals(projects=1, prompts=100),
        Totals(projects=1, prompts=100),
    )
    assert rig.gateway.transfers == []


# ==== the ceiling backstop ==================================================================


@pytest.mark.parametrize(
    ("need", "status", "error_code", "after"),
    [
        (50, "topped-up", None, Totals(projects=5, prompts=150)),
        (51, "rejected", "brandAiLimit", Totals(projects=1, prompts=100)),
    ],
)
def test_worker_applies_the_environment_ceiling_backstop(
    need: int, status: str, error_code: str | None, after: Totals
) -> None:
    # Given a prompts backstop of 150 and a full child at 100 (a message with no ceiling)
    rig = _rig(
        _family(("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100))),
        {"SERENITY_BRAND_AI_CEILING_PROMPTS": "150"},
    )

    # When exactly the backstop's room (50) or one more is ensured
    assert rig.invoke(_ensure("r1", "c1", need)) == []

    # Then up to the backstop is served (capped, not 150 plus four blocks; its one used project
    # refilled ahead to 1 + 4 = 5, the backstop naming prompts only), one over is refused
    outcome = rig.outcome("r1")
    assert (outcome.status, outcome.error_code) == (status, error_code)
    assert rig.gateway.totals_of("c1") == after


# ==== the request's identity on its outcome ================================================


def test_worker_outcome_carries_the_request_labels() -> None:
    # Given an ensure and a sweep release labelled with their org, brand and run
    rig = _rig(
        _family(
            ("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
            ("c2", Totals(projects=1, prompts=900), Totals(projects=1, prompts=100)),
        )
    )

    # When both are handled
    failed = rig.invoke(
        _ensure("r1", "c1", 1, org_id="org-7", brand_id="brand-9"),
        _release("r2", "c2", source="sweep", run_id="rs-1", org_id="org-7", brand_id="brand-9"),
    )

    # Then each outcome carries its request's labels; only a release has a source and run
    assert failed == []
    assert [
        (o.org_id, o.brand_id, o.source, o.run_id, o.coalesced)
        for o in (rig.outcome("r1"), rig.outcome("r2"))
    ] == [("org-7", "brand-9", None, None, 1), ("org-7", "brand-9", "sweep", "rs-1", 1)]


def test_worker_release_busy_on_its_final_receive_is_rejected_and_dead_lettered() -> None:
    # Given a child that keeps answering "workspace not ready"
    gateway = _family(("c1", Totals(projects=1, prompts=900), Totals(projects=1, prompts=100)))
    gateway.script_not_ready("c1", transfers=100)
    rig = _rig(gateway)

    # When its release fails on the final receive
    rig.invoke(_release("r1", "c1", receive_count=MAX_RECEIVE_COUNT))

    # Then the outcome is a workspaceBusy rejection, marked as ending in the DLQ
    outcome = rig.outcome("r1")
    assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
        "rejected",
        "workspaceBusy",
        True,
    )
    assert rig.gateway.totals_of("c1") == Totals(projects=1, prompts=900)


# ==== invalid parents and duplicate records =================================================


def test_worker_ensure_naming_another_parent_is_dead_lettered_as_invalid() -> None:
    # Given a full child of the master, and another master the message wrongly names
    gateway = _family(("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)))
    gateway.add_master("ws-other", total=Totals(projects=50, prompts=10_000))
    rig = _rig(gateway)
    record = _ensure("r1", "c1", 1, parent_workspace_id="ws-other")

    # When the ensure is handled
    failed = rig.invoke(record)

    # Then it completes without a transfer: to the DLQ with its reason, and an invalid outcome
    # (dead-lettered) so its service hears back
    assert failed == []
    assert rig.gateway.transfers == []
    assert [(d.reason, d.dedup_id, d.source_message_id) for d in rig.dead_letters.sent] == [
        (
            "parentMismatch: parent_workspace_id is not the parent of workspace_id",
            "m-r1",
            "m-r1",
        )
    ]
    outcome = rig.outcome("r1")
    assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
        "invalid",
        "parentMismatch",
        True,
    )


def test_worker_second_record_of_a_request_completes_with_the_first() -> None:
    # Given one ensure of 100 prompts delivered twice in one batch (two records, one request
    # id), then an ensure for another child
    rig = _rig(
        _family(
            ("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
            ("c2", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
        )
    )
    first = _ensure("r1", "c1", 100)
    second = {**first, "messageId": "m-r1-copy", "receiptHandle": "rh-m-r1-copy"}

    # When the batch is handled
    failed = rig.invoke(first, second, _ensure("r2", "c2", 1))

    # Then the request is applied once (its need not doubled in a combined top-up), both
    # records complete, and the record after the copy is applied too (each its need plus four
    # blocks: 200 + 400 and 101 + 400; each child's one used project refilled ahead to 5)
    assert failed == []
    assert rig.gateway.transfers == [
        ("c1", Totals(projects=5, prompts=600)),
        ("c2", Totals(projects=5, prompts=501)),
    ]
    assert [o.request_id for o in rig.outcomes.published] == ["r1", "r2"]


def test_plan_batch_message_listed_twice_counts_once_and_the_rest_is_planned() -> None:
    # Given a batch listing one SQS message twice, then a record for another child (the
    # handler's edge already drops such a repeat; the plan must not depend on it)
    def inbound(message_id: str, child: str) -> InboundMessage:
        body = {
            "version": 1,
            "kind": "release",
            "request_id": f"req-{message_id}",
            "workspace_id": child,
        }
        return InboundMessage(message_id=message_id, group_id=child, body=json.dumps(body))

    # When planned
    plan = plan_batch(
        [inbound("m1", "c1"), inbound("m1", "c1"), inbound("m2", "c2")], dynamic_allocation=True
    )

    # Then each message is planned once, in order
    assert plan.order == ("m1", "m2")


# ==== sibling reclaim =======================================================================

RECLAIM = {
    "SERENITY_SIBLING_RECLAIM": "true",
    "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/serenity-unit.fifo",
    "SIBLING_RECLAIM_MAX_SIBLINGS": "1",
}


def _reclaim_id(request_id: str, receive_count: int, sibling: str) -> str:
    digest = hashlib.sha256(f"{request_id}|{receive_count}|{sibling}".encode()).hexdigest()
    return f"reclaim-{digest[:32]}"


def test_worker_parks_an_ensure_on_its_richest_sibling_up_to_the_configured_count() -> None:
    # Given an empty pool, a full child, and two idle siblings (900 and 400 prompts to give),
    # with at most one sibling asked per park
    rig = _rig(
        _family(
            ("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
            ("s1", Totals(projects=1, prompts=1_000), Totals(projects=1, prompts=100)),
            ("s2", Totals(projects=1, prompts=500), Totals(projects=1, prompts=100)),
            pool=Totals(),
        ),
        RECLAIM,
    )
    ensure = _ensure("r1", "c1", 1, org_id="org-7")

    # When the ensure is handled on its first and second receive
    first = rig.invoke(ensure)
    second = rig.invoke(_received(ensure, 2))

    # Then each receive parks it (failed for redelivery) with one release of the richest
    # sibling, under an id of its own per receive, labelled with the request's org
    assert (first, second) == (["m-r1"], ["m-r1"])
    assert [
        (r.request_id, r.workspace_id, r.source, r.org_id)
        for r in rig.producer.many
        if isinstance(r, ReleaseRequest)
    ] == [
        (_reclaim_id("r1", 1, "s1"), "s1", "reclaim", "org-7"),
        (_reclaim_id("r1", 2, "s1"), "s1", "reclaim", "org-7"),
    ]
    assert len(rig.producer.many) == 2
    assert rig.gateway.totals_of("c1") == Totals(projects=1, prompts=100)


def _metric_dimension_values(out: str, name: str, dimension: str) -> list[str]:
    """The ``dimension`` value of every EMF datum of metric ``name`` printed in ``out``."""
    blobs = (json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"'))
    return [
        str(blob[dimension])
        for blob in blobs
        for directive in blob["_aws"]["CloudWatchMetrics"]
        if any(metric["Name"] == name for metric in directive["Metrics"])
    ]


def test_worker_parks_nothing_when_only_the_asking_child_has_surplus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an empty pool and a child short of prompts that holds 3 unused projects, with no
    # sibling that could give
    rig = _rig(
        _family(
            ("c1", Totals(projects=4, prompts=100), Totals(projects=1, prompts=100)),
            ("lean", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
            pool=Totals(),
        ),
        RECLAIM,
    )

    # When the ensure is handled
    failed = rig.invoke(_ensure("r1", "c1", 1))

    # Then the child is never its own donor: nothing is enqueued, the reclaim is counted as
    # exhausted and the ensure is rejected now
    assert failed == []
    assert rig.producer.many == []
    assert _metric_dimension_values(capsys.readouterr().out, "SiblingReclaim", "Result") == [
        "exhausted"
    ]
    outcome = rig.outcome("r1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")


# ==== release floors and an unwired outcome sink ===========================================


def test_worker_release_keeps_the_floor_the_message_asks_for() -> None:
    # Given a child using 100 of 1000 prompts
    rig = _rig(_family(("c1", Totals(projects=1, prompts=1_000), Totals(projects=1, prompts=100))))

    # When released with a floor of 500 prompts
    assert rig.invoke(_release_with_floor("r1", "c1", Totals(projects=1, prompts=500))) == []

    # Then the child keeps the floor, not one block
    assert rig.gateway.transfers == [("c1", Totals(projects=1, prompts=500))]


def test_worker_without_an_outcome_sink_still_applies_and_completes() -> None:
    # Given a worker with no outcome publisher wired
    rig = _rig(
        _family(("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100))),
        publish=False,
    )

    # When an ensure is handled / Then it is applied (101 plus four blocks; its project
    # refilled ahead too, to 1 + 4) and its record completes
    assert rig.invoke(_ensure("r1", "c1", 1)) == []
    assert rig.gateway.totals_of("c1") == Totals(projects=5, prompts=501)


def test_worker_forgets_a_park_once_the_ensure_ends() -> None:
    # Given an empty pool, a full child and one idle sibling, parks allowed twice
    rig = _rig(
        _family(
            ("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
            ("s1", Totals(projects=1, prompts=1_000), Totals(projects=1, prompts=100)),
            pool=Totals(),
        ),
        {**RECLAIM, "SIBLING_RECLAIM_MAX_PARKS": "1"},
    )
    ensure = _ensure("r1", "c1", 1)

    # When it is parked on its first receive and comes back (the release never ran)
    assert rig.invoke(ensure) == ["m-r1"]
    parked = set(rig.runtime.parked)
    assert rig.invoke(_received(ensure, 2)) == []

    # Then the container remembered the park while it lasted and forgot it at the rejection
    assert parked == {"r1"}
    assert rig.runtime.parked == set()
    assert (rig.outcome("r1").status, rig.outcome("r1").error_code) == (
        "rejected",
        "orgPoolExhausted",
    )


# ==== invalid records =======================================================================


def test_worker_dead_letters_each_invalid_record_with_the_reason() -> None:
    # Given a record in the wrong group, one whose body misses a field and breaks a bound,
    # and one whose receive count is not a number
    rig = _rig(_family(("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100))))
    wrong_group = {**_ensure("r1", "c1", 1)}
    wrong_group["attributes"] = {**wrong_group["attributes"], "MessageGroupId": "c2"}
    bad_body = _record(
        {"kind": "ensure", "request_id": "r2", "workspace_id": "c1", "need": {"prompts": -1}}
    )
    bad_count = _received(_ensure("r3", "c1", 1), 1)
    bad_count["attributes"] = {**bad_count["attributes"], "ApproximateReceiveCount": "x"}

    # When the batch is handled
    failed = rig.invoke(wrong_group, bad_body, bad_count)

    # Then each goes to the DLQ once with what is wrong with it, and nothing is applied
    assert failed == []
    assert [(d.source_message_id, d.reason) for d in rig.dead_letters.sent] == [
        ("m-r1", "MessageGroupId: must equal workspace_id"),
        (
            "m-r2",
            "parent_workspace_id: Field required; "
            "need.prompts: Input should be greater than or equal to 0",
        ),
        ("m-r3", "attributes.ApproximateReceiveCount: not a positive integer"),
    ]
    assert rig.gateway.transfers == []
    # And each request id is readable, so each caller hears back with an invalid outcome
    for request_id in ("r1", "r2", "r3"):
        outcome = rig.outcome(request_id)
        assert (outcome.status, outcome.error_code, outcome.dead_lettered) == (
            "invalid",
            "invalidMessage",
            True,
        )


# ==== coalesced runs ========================================================================


def test_worker_combined_top_up_counts_drafts_when_one_member_asks() -> None:
    # Given a child using 50 of 100 prompts with 80 more drafted
    gateway = _family()
    gateway.add_child(
        "c1",
        MASTER,
        total=Totals(projects=1, prompts=100),
        used=Totals(projects=1, prompts=50),
        drafted=Totals(prompts=80),
    )
    rig = _rig(gateway)

    # When two ensures of 10 prompts for it arrive together, the first counting drafts
    failed = rig.invoke(_ensure("r1", "c1", 10, include_drafted=True), _ensure("r2", "c1", 10))

    # Then one combined top-up sized on used + drafted + both needs (150 plus four blocks: 550;
    # the used project refilled ahead to 1 + 4 = 5)
    assert failed == []
    assert rig.gateway.transfers == [("c1", Totals(projects=5, prompts=550))]
    assert [(o.status, o.coalesced) for o in (rig.outcome("r1"), rig.outcome("r2"))] == [
        ("topped-up", 2),
        ("topped-up", 2),
    ]


# ==== outcomes that cannot be published =====================================================


def test_worker_holds_back_only_the_groups_whose_outcome_was_not_published() -> None:
    # Given eleven children each covering its need, and an outcome publisher whose first call
    # (the first ten outcomes) fails while the second (the eleventh) goes out
    children = [f"c{index:02d}" for index in range(11)]
    rig = _rig(_family(*((child, Totals(projects=1, prompts=100), Totals()) for child in children)))
    rig.outcomes = RecordingOutcomes(fail_calls=[1])
    rig.runtime.outcomes = rig.outcomes

    # When one ensure per child arrives
    failed = rig.invoke(*(_ensure(f"r{child}", child, 1) for child in children))

    # Then the ten unannounced records come back; the eleventh, in a group of its own, does not
    assert failed == [f"m-r{child}" for child in children[:10]]
    assert [o.request_id for o in rig.outcomes.published] == ["rc10"]


# ==== what the logs say =====================================================================


def _log_lines(out: str, *messages: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in out.splitlines() if line.startswith('{"level"'))
    return [line for line in lines if line["message"] in messages]


def test_worker_logs_each_outcome_and_retry_with_its_records_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a full child and a child that keeps answering "workspace not ready"
    gateway = _family(
        ("c1", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
        ("c2", Totals(projects=1, prompts=100), Totals(projects=1, prompts=100)),
    )
    gateway.script_not_ready("c2", transfers=10)
    rig = _rig(gateway)
    # The Powertools handler holds the stdout it found at import: read its lines directly.
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)

    # When an ensure for each arrives, the second on its second receive
    rig.invoke(_ensure("r1", "c1", 1), _received(_ensure("r2", "c2", 1), 2))

    # Then the outcome and the retry are logged with their own record's ids (the log lines
    # operators search by request id), the retry with its code and whether it was the last
    keys = ("message_id", "workspace_id", "request_id", "kind", "receive_count")
    logged = [
        (
            line["message"],
            *(line[key] for key in keys),
            line.get("error_code"),
            line.get("final_receive"),
        )
        for line in _log_lines(out.getvalue(), "allocation outcome", "request will be retried")
    ]
    assert logged == [
        ("allocation outcome", "m-r1", "c1", "r1", "ensure", 1, None, None),
        ("request will be retried", "m-r2", "c2", "r2", "ensure", 2, "workspaceBusy", False),
    ]
