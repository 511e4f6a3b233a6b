"""The Allocator Lambda end to end in memory: real handler, in-memory gateway and AWS fakes.

Every test calls ``lambda_handler(event, context, runtime=...)`` exactly as Lambda would, with
an injected runtime: the in-memory conserving gateway, a fake clock whose sleeps never wait,
and recording fakes for the DLQ, the outcome bus and the producer. No AWS, no network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from serenity_allocator.adapters.aws_clients import AWS_CALL_BUDGET_S
from serenity_allocator.adapters.observability import METRIC_CATALOG, NAMESPACE, SERVICE
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.messages import AllocationOutcome, ReleaseRequest
from serenity_allocator.domain.model import Totals
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.lambda_context import LocalLambdaContext
from tests.fakes import (
    LIST_FAMILY,
    READ_RESOURCES,
    READ_STATUS,
    TRANSFER,
    FakeClock,
    InMemoryGateway,
    RecordingDeadLetters,
    RecordingEnqueuer,
    RecordingOutcomes,
    sqs_event,
    sqs_record,
)

MASTER = "ws-master"
ENVIRONMENT = "unit"
MAX_RECEIVE_COUNT = 5
SENT_MS = 1_748_779_200_000
QUEUE_LAG_MS = 1_500.0
BASE_ENV = {
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "tok-unit-never-used",
    "ENVIRONMENT": ENVIRONMENT,
    "MAX_RECEIVE_COUNT": str(MAX_RECEIVE_COUNT),
    "SERENITY_DYNAMIC_ALLOCATION": "true",
}
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/serenity-unit.fifo"
FUNCTION_NAME = "serenity-allocator-unit"
FUNCTION_TIMEOUT_MS = 60_000
"""The template's Allocator timeout: a fresh invocation has this much time left."""
FULL = Totals(projects=1, prompts=100)
"""A child at one block, using all of it."""


# ==== the rig ===============================================================================


@dataclass
class Worker:
    """One container: settings, fakes and a runtime reused across invocations."""

    gateway: InMemoryGateway
    clock: FakeClock
    runtime: AllocatorRuntime
    dead_letters: RecordingDeadLetters | None
    outcomes: RecordingOutcomes | None
    producer: RecordingEnqueuer | None
    responses: list[dict[str, Any]] = field(default_factory=list)

    def invoke(self, *records: dict[str, Any], remaining_ms: int | None = None) -> dict[str, Any]:
        context = LocalLambdaContext(
            FUNCTION_NAME, (remaining_ms or FUNCTION_TIMEOUT_MS) / 1000.0, self.clock
        )
        response: dict[str, Any] = lambda_handler(
            sqs_event(*records), context, runtime=self.runtime
        )
        self.responses.append(response)
        return response

    def outcome(self, request_id: str) -> AllocationOutcome:
        assert self.outcomes is not None
        return self.outcomes.by_request()[request_id]


def _worker(
    gateway: InMemoryGateway,
    *,
    dlq: bool = True,
    outcomes: RecordingOutcomes | None = None,
    producer: bool = False,
    clock: FakeClock | None = None,
    **env: str,
) -> Worker:
    clock = clock or FakeClock()
    settings = AllocatorSettings.from_env({**BASE_ENV, **env})
    dead_letters = RecordingDeadLetters() if dlq else None
    publisher = outcomes if outcomes is not None else RecordingOutcomes()
    enqueuer = RecordingEnqueuer() if producer else None
    runtime = AllocatorRuntime(
        settings=settings,
        gateway=gateway,
        dead_letters=dead_letters,
        outcomes=publisher,
        producer=enqueuer,
        clock=clock,
        sleep=clock.sleep,
        wall_clock_ms=lambda: SENT_MS + QUEUE_LAG_MS,
    )
    return Worker(gateway, clock, runtime, dead_letters, publisher, enqueuer)


def _family(
    *children: tuple[str, Totals, Totals],
    pool_total: Totals = Totals(projects=50, prompts=10_000),  # noqa: B008 - frozen value
    pool_used: Totals | None = None,
    limits_enabled: bool | None = True,
) -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=pool_total, used=pool_used, ai_limits_enabled=limits_enabled)
    for child_id, total, used in children:
        gateway.add_child(child_id, MASTER, total=total, used=used)
    return gateway


def _ensure(
    message_id: str,
    child: str,
    prompts: int = 0,
    *,
    projects: int = 0,
    receive_count: int = 1,
    ceiling: Totals | None = None,
    include_drafted: bool = False,
    parent: str = MASTER,
    group: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "kind": "ensure",
        "request_id": f"req-{message_id}",
        "workspace_id": child,
        "parent_workspace_id": parent,
        "need": {"projects": projects, "prompts": prompts},
        "include_drafted": include_drafted,
    }
    if ceiling is not None:
        body["ceiling"] = ceiling.as_dict()
    return sqs_record(
        body,
        message_id=message_id,
        group_id=group or child,
        receive_count=receive_count,
        sent_timestamp_ms=SENT_MS,
        dedup_id=f"req-{message_id}",
    )


def _release(
    message_id: str, child: str, *, receive_count: int = 1, floor: Totals | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "kind": "release",
        "request_id": f"req-{message_id}",
        "workspace_id": child,
    }
    if floor is not None:
        body["floor"] = floor.as_dict()
    return sqs_record(
        body,
        message_id=message_id,
        group_id=child,
        receive_count=receive_count,
        sent_timestamp_ms=SENT_MS,
    )


def _failures(response: dict[str, Any]) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


# ==== EMF parsing ===========================================================================


@dataclass(frozen=True)
class Datum:
    """One metric as printed in EMF."""

    name: str
    unit: str
    dimensions: dict[str, str]
    values: tuple[float, ...]


def _emf(capsys: pytest.CaptureFixture[str]) -> tuple[list[dict[str, Any]], list[Datum]]:
    blobs = []
    for raw_line in capsys.readouterr().out.splitlines():
        line = raw_line.strip()
        if not line.startswith("{"):
            continue
        payload = json.loads(line)
        if "_aws" in payload:
            blobs.append(payload)
    data = []
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            names = [name for group in directive["Dimensions"] for name in group]
            dimensions = {name: blob[name] for name in names}
            for metric in directive["Metrics"]:
                raw = blob[metric["Name"]]
                values = tuple(raw if isinstance(raw, list) else [raw])
                data.append(Datum(metric["Name"], metric["Unit"], dimensions, values))
    return blobs, data


def _total(data: list[Datum], name: str, dimension_value: str | None = None) -> float:
    spec = METRIC_CATALOG[name]
    return sum(
        sum(d.values)
        for d in data
        if d.name == name
        and (spec.dimension is None or d.dimensions.get(spec.dimension) == dimension_value)
    )


# ==== hot path, top-up, refusals ============================================================


def test_lambda_handler_hot_path_is_exactly_one_gateway_call() -> None:
    # Given a child with room for the write
    worker = _worker(_family(("c1", Totals(projects=1, prompts=500), FULL)))

    # When one ensure arrives
    response = worker.invoke(_ensure("m1", "c1", 100))

    # Then one read of the child, nothing else; the message completes as hot-path
    assert worker.gateway.calls == [(READ_RESOURCES, "c1")]
    assert response == {"batchItemFailures": []}
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.kind, outcome.receive_count) == ("hot-path", "ensure", 1)
    assert outcome.totals_before == outcome.totals_after == Totals(projects=1, prompts=500)


def test_lambda_handler_top_up_in_one_transfer_rounded_to_block() -> None:
    # Given a child using all it holds
    worker = _worker(_family(("c1", FULL, FULL)))

    # When it needs 250 more prompts
    response = worker.invoke(_ensure("m1", "c1", 250))

    # Then one absolute transfer to used + need in whole blocks (100 + 250 -> 400)
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=400))]
    assert worker.gateway.calls == [
        (READ_RESOURCES, "c1"),
        (LIST_FAMILY, MASTER),  # is the parent metered? (cached afterwards)
        (READ_RESOURCES, MASTER),  # advisory pool read
        (TRANSFER, "c1"),
    ]
    assert _failures(response) == []
    outcome = worker.outcome("req-m1")
    assert outcome.status == "topped-up"
    assert (outcome.totals_before, outcome.totals_after) == (FULL, Totals(projects=1, prompts=400))
    assert worker.gateway.family_units(MASTER) == Totals(projects=51, prompts=10_100)


def test_lambda_handler_include_drafted_from_the_message_sizes_the_top_up() -> None:
    # Given two children using 50 of 100 prompts with 80 more drafted
    gateway = _family()
    for child in ("c1", "c2"):
        gateway.add_child(
            child,
            MASTER,
            total=Totals(projects=1, prompts=100),
            used=Totals(projects=1, prompts=50),
            drafted=Totals(projects=0, prompts=80),
        )
    worker = _worker(gateway)

    # When one ensure counts the drafts and the other does not
    worker.invoke(_ensure("m1", "c1", 10, include_drafted=True), _ensure("m2", "c2", 10))

    # Then only the one that asked is topped up past its drafts
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=200))]
    assert [worker.outcome(r).status for r in ("req-m1", "req-m2")] == ["topped-up", "hot-path"]


def test_lambda_handler_ceiling_rejects_with_brand_ai_limit_and_completes() -> None:
    # Given a child whose top-up would pass its brand ceiling
    worker = _worker(_family(("c1", FULL, FULL)))

    # When the ensure arrives
    response = worker.invoke(_ensure("m1", "c1", 400, ceiling=Totals(projects=5, prompts=300)))

    # Then no transfer, the message completes with a rejection outcome
    assert worker.gateway.transfers == []
    assert _failures(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "brandAiLimit")


def test_lambda_handler_pool_exhausted_rejects_and_completes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a pool with 50 free prompts and a child needing 60 more (block: 100)
    worker = _worker(
        _family(
            ("c1", FULL, FULL),
            pool_total=Totals(projects=50, prompts=1_000),
            pool_used=Totals(projects=0, prompts=950),
        )
    )

    # When the ensure arrives
    response = worker.invoke(_ensure("m1", "c1", 60))

    # Then the block top-up was refused and, the pool read showing that even the exact raise
    # cannot fit, no doomed fallback was sent: orgPoolExhausted
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=200))]
    assert worker.gateway.totals_of("c1") == FULL
    assert _failures(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")
    _, data = _emf(capsys)
    assert _total(data, "TightPoolFallback", "rejected") == 1
    assert _total(data, "AllocationRejection", "orgPoolExhausted") == 1
    # ... and the refused top-up still counts as one attempted, with its one timed call, so
    # the hot-path ratio and the latency show a dry pool
    assert _total(data, "HeadroomCheck", "topped-up") == 1
    assert [
        len(d.values)
        for d in data
        if d.name == "TopUpLatencyMs" and d.dimensions["Path"] == "fail-fast"
    ] == [1]


def test_lambda_handler_tight_pool_fallback_saves_exact_need(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a pool with exactly the 50 prompts needed, but not a full block of 100
    worker = _worker(
        _family(
            ("c1", FULL, FULL),
            pool_total=Totals(projects=50, prompts=1_000),
            pool_used=Totals(projects=0, prompts=950),
        )
    )

    # When the child needs 50 more
    response = worker.invoke(_ensure("m1", "c1", 50))

    # Then the block top-up was refused and the exact one went through
    assert worker.gateway.transfers == [
        ("c1", Totals(projects=1, prompts=200)),
        ("c1", Totals(projects=1, prompts=150)),
    ]
    assert _failures(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_after) == ("topped-up", Totals(projects=1, prompts=150))
    _, data = _emf(capsys)
    assert _total(data, "TightPoolFallback", "saved") == 1
    assert _total(data, "AllocationRejection", "orgPoolExhausted") == 0


def test_lambda_handler_tight_pool_rejected_when_fallback_switched_off() -> None:
    # Given the same tight pool with the fallback off
    worker = _worker(
        _family(
            ("c1", FULL, FULL),
            pool_total=Totals(projects=50, prompts=1_000),
            pool_used=Totals(projects=0, prompts=950),
        ),
        SERENITY_TIGHT_POOL_FALLBACK="false",
    )

    # When the child needs 50 more / Then the plain path rejects it after one transfer
    worker.invoke(_ensure("m1", "c1", 50))
    assert len(worker.gateway.transfers) == 1
    assert worker.outcome("req-m1").error_code == "orgPoolExhausted"


def test_lambda_handler_not_ready_then_success_within_handler_retries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a child that answers "not ready" to its next two transfers
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 2)

    # When the ensure arrives
    response = worker.invoke(_ensure("m1", "c1", 100))

    # Then the third attempt went through after two short fake sleeps (no real wait)
    assert _failures(response) == []
    assert worker.outcome("req-m1").status == "topped-up"
    assert worker.gateway.calls_of(TRANSFER) == ["c1", "c1", "c1"]
    assert worker.clock.sleeps == [0.25, 0.5]
    _, data = _emf(capsys)
    assert _total(data, "NotReadyRetry") == 2


def test_lambda_handler_busy_child_fails_the_item_for_redelivery() -> None:
    # Given a child that stays "not ready" through every in-handler retry
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the ensure arrives on its first receive
    response = worker.invoke(_ensure("m1", "c1", 100))

    # Then it is a batch item failure, with no terminal outcome yet
    assert _failures(response) == ["m1"]
    assert worker.outcomes is not None and worker.outcomes.published == []


def test_lambda_handler_busy_on_final_receive_records_outcome_and_still_fails() -> None:
    # Given a busy child and a message on its last receive before the DLQ
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the ensure arrives with ApproximateReceiveCount == MAX_RECEIVE_COUNT
    response = worker.invoke(_ensure("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then its terminal outcome is published AND it still fails, so SQS moves it to the DLQ
    assert _failures(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        "rejected",
        "workspaceBusy",
        MAX_RECEIVE_COUNT,
    )


def test_lambda_handler_final_receive_skipped_behind_its_group_gets_a_terminal_outcome() -> None:
    # Given a busy child whose head message is retried, and a later message of the same group
    # on its own final receive (it will be moved to the DLQ after this one)
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)
    head = _ensure("m1", "c1", 100, receive_count=2)
    behind = _release("m2", "c1", receive_count=MAX_RECEIVE_COUNT)

    # When the batch is handled
    response = worker.invoke(head, behind)

    # Then both fail (FIFO), the head gets no outcome yet (it has receives left), and the one
    # skipped behind it on its final receive is told: failed / groupBlocked
    assert _failures(response) == ["m1", "m2"]
    assert worker.outcomes.by_request().keys() == {"req-m2"}
    outcome = worker.outcome("req-m2")
    assert (outcome.status, outcome.error_code, outcome.receive_count) == (
        "failed",
        "groupBlocked",
        MAX_RECEIVE_COUNT,
    )


def test_lambda_handler_terminal_upstream_answer_completes_as_failed() -> None:
    # Given an upstream that refuses the child read with 403 (a retry cannot fix it)
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(403, "no", "read")])

    # When the ensure arrives / Then it completes with a failed outcome
    response = worker.invoke(_ensure("m1", "c1", 100))
    assert _failures(response) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("failed", "upstream403")


def test_lambda_handler_server_error_fails_the_item() -> None:
    # Given an upstream answering 500 / When the ensure arrives / Then it is retried later
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [UpstreamError(500, "boom", "read")])
    assert _failures(worker.invoke(_ensure("m1", "c1", 100))) == ["m1"]


@pytest.mark.parametrize(
    ("error", "code"),
    [(UpstreamError(500, "boom", "read"), "upstream500"), (RuntimeError("bug"), "RuntimeError")],
    ids=["5xx", "unexpected"],
)
def test_lambda_handler_retryable_failure_on_final_receive_records_failed_outcome(
    error: Exception, code: str
) -> None:
    # Given a failure a retry could fix, on the message's last receive
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c1", [error])

    # When the ensure arrives
    response = worker.invoke(_ensure("m1", "c1", 100, receive_count=MAX_RECEIVE_COUNT))

    # Then the terminal outcome says failed with the code, and the item fails to the DLQ
    assert _failures(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("failed", code)


# ==== coalescing and order ==================================================================


def test_lambda_handler_coalesces_consecutive_ensures_into_one_transfer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a child using all it holds and three ensures for it in one batch
    worker = _worker(_family(("c1", FULL, FULL)))

    # When the batch arrives (needs 100 + 250 + 50)
    response = worker.invoke(
        _ensure("m1", "c1", 100), _ensure("m2", "c1", 250), _ensure("m3", "c1", 50)
    )

    # Then one child read, one pool read and one transfer sized for the sum (100 + 400 -> 500)
    assert worker.gateway.calls_of(READ_RESOURCES) == ["c1", MASTER]
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=500))]
    assert _failures(response) == []
    # ... and each request gets its own outcome, saying it was served by a run of three
    for message_id in ("m1", "m2", "m3"):
        outcome = worker.outcome(f"req-{message_id}")
        assert (outcome.status, outcome.coalesced) == ("topped-up", 3)
        assert outcome.totals_after == Totals(projects=1, prompts=500)
    _, data = _emf(capsys)
    assert _total(data, "CoalescedEnsures") == 2
    assert _total(data, "HeadroomCheck", "topped-up") == 1


def test_lambda_handler_combined_run_refused_by_ceiling_falls_back_per_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given two ensures whose sum passes the ceiling, the first fitting on its own
    worker = _worker(_family(("c1", FULL, FULL)))
    ceiling = Totals(projects=10, prompts=400)

    # When the batch arrives (100 fits: 200; 350 alone needs 500 > 400)
    response = worker.invoke(
        _ensure("m1", "c1", 100, ceiling=ceiling), _ensure("m2", "c1", 350, ceiling=ceiling)
    )

    # Then the members applied one by one, in order: the first topped up, the second refused
    assert worker.gateway.transfers == [("c1", Totals(projects=1, prompts=200))]
    assert _failures(response) == []
    first, second = worker.outcome("req-m1"), worker.outcome("req-m2")
    assert (first.status, first.coalesced) == ("topped-up", 1)
    assert (second.status, second.error_code) == ("rejected", "brandAiLimit")
    # ... and the refused combined attempt is not counted as a rejection of its own
    _, data = _emf(capsys)
    assert _total(data, "AllocationRejection", "brandAiLimit") == 1
    assert _total(data, "CoalescedEnsures") == 0


def test_lambda_handler_coalesced_run_with_terminal_upstream_answer_fails_each_member() -> None:
    # Given a child the upstream refuses with 403 on every read
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_errors(
        READ_RESOURCES, "c1", [UpstreamError(403, "forbidden", "read") for _ in range(3)]
    )

    # When three ensures for it arrive together
    response = worker.invoke(
        _ensure("m1", "c1", 100), _ensure("m2", "c1", 100), _ensure("m3", "c1", 100)
    )

    # Then every member completes with its own failed outcome (none is left for redelivery)
    assert _failures(response) == []
    assert [worker.outcome(f"req-m{i}").status for i in (1, 2, 3)] == ["failed"] * 3
    assert {worker.outcome(f"req-m{i}").error_code for i in (1, 2, 3)} == {"upstream403"}


def test_lambda_handler_coalesced_run_busy_fails_the_group_and_counts_the_rejection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a busy child and three ensures for it
    worker = _worker(_family(("c1", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the batch arrives
    response = worker.invoke(
        _ensure("m1", "c1", 100), _ensure("m2", "c1", 100), _ensure("m3", "c1", 100)
    )

    # Then all three wait for redelivery, and the busy rejection is counted once
    assert _failures(response) == ["m1", "m2", "m3"]
    _, data = _emf(capsys)
    assert _total(data, "AllocationRejection", "workspaceBusy") == 1


def test_lambda_handler_applies_a_group_in_order_with_a_release_in_between() -> None:
    # Given a child using all it holds
    worker = _worker(_family(("c1", FULL, FULL)))

    # When ensure(300), release, ensure(100) arrive in that order
    response = worker.invoke(
        _ensure("m1", "c1", 300), _release("m2", "c1"), _ensure("m3", "c1", 100)
    )

    # Then the effects happen in that order: up to 400, back to 100, up to 200
    assert worker.gateway.transfers == [
        ("c1", Totals(projects=1, prompts=400)),
        ("c1", Totals(projects=1, prompts=100)),
        ("c1", Totals(projects=1, prompts=200)),
    ]
    assert _failures(response) == []
    statuses = [worker.outcome(f"req-m{i}").status for i in (1, 2, 3)]
    assert statuses == ["topped-up", "released", "topped-up"]
    assert worker.outcome("req-m2").totals_after == FULL
    assert worker.gateway.family_units(MASTER) == Totals(projects=51, prompts=10_100)


# ==== kill switch ===========================================================================


def test_lambda_handler_kill_switch_off_ensure_is_a_noop_but_release_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the kill switch off, a short child and a child with surplus
    worker = _worker(
        _family(("c1", FULL, FULL), ("c2", Totals(projects=1, prompts=900), FULL)),
        SERENITY_DYNAMIC_ALLOCATION="false",
    )

    # When an ensure for c1 and a release for c2 arrive
    response = worker.invoke(_ensure("m1", "c1", 500), _release("m2", "c2"))

    # Then the ensure made zero calls and completed as disabled; the release still ran
    assert {workspace for _, workspace in worker.gateway.calls} == {"c2"}  # never c1
    assert worker.gateway.transfers == [("c2", FULL)]
    assert _failures(response) == []
    assert worker.outcome("req-m1").status == "disabled"
    assert worker.outcome("req-m2").status == "released"
    _, data = _emf(capsys)
    assert _total(data, "DisabledNoop") == 1


def test_lambda_handler_kill_switch_off_makes_zero_gateway_calls_for_ensures() -> None:
    # Given the kill switch off / When a batch of ensures arrives
    worker = _worker(_family(("c1", FULL, FULL)), SERENITY_DYNAMIC_ALLOCATION="True")
    worker.invoke(_ensure("m1", "c1", 500), _ensure("m2", "c1", 500))

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
    worker = _worker(_family(("c1", FULL, FULL), ("c2", FULL, FULL)))
    cases = _invalid_records()

    # When the batch arrives
    response = worker.invoke(*(record for record, _ in cases))

    # Then none reached Semrush; each went to the DLQ with a reason naming the field; all done
    assert worker.gateway.calls == []
    assert _failures(response) == []
    assert worker.dead_letters is not None
    sent = {letter.source_message_id: letter for letter in worker.dead_letters.sent}
    for record, named in cases:
        letter = sent[record["messageId"]]
        assert named in letter.reason, (record["messageId"], letter.reason)
        assert letter.body == record["body"]
        assert letter.group_id == record["attributes"]["MessageGroupId"]
    assert worker.outcomes is not None and worker.outcomes.published == []
    _, data = _emf(capsys)
    assert _total(data, "InvalidMessage") == len(cases)


def test_lambda_handler_invalid_messages_without_dlq_are_item_failures() -> None:
    # Given no DLQ configured, an invalid message, and a valid one for another child
    worker = _worker(
        _family(("c1", FULL, FULL), ("c3", Totals(projects=1, prompts=500), FULL)), dlq=False
    )
    invalid = [record for record, _ in _invalid_records()[:2]]

    # When the batch arrives
    response = worker.invoke(invalid[0], _ensure("ok", "c3", 100), invalid[1])

    # Then the invalid ones fail (nothing is dropped) and never reach Semrush; the valid completes
    assert _failures(response) == ["bad-json", "negative"]
    assert worker.gateway.calls == [(READ_RESOURCES, "c3")]
    assert worker.outcome("req-ok").status == "hot-path"


# ==== batch item failures ===================================================================


def test_lambda_handler_failed_group_holds_back_only_its_own_messages() -> None:
    # Given c1 busy and c2 fine, their messages interleaved
    worker = _worker(_family(("c1", FULL, FULL), ("c2", FULL, FULL), ("c3", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When the batch arrives
    response = worker.invoke(
        _ensure("a1", "c1", 100),
        _ensure("b1", "c2", 100),
        _release("a2", "c1"),
        _release("b2", "c2"),
        _ensure("c-1", "c3", 100),
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
    worker = _worker(_family(("c1", FULL, FULL), ("c2", FULL, FULL)))
    worker.gateway.script_not_ready("c1", 10)
    worker.gateway.script_not_ready("c2", 10)

    # When a batch where every record fails arrives
    response = worker.invoke(_ensure("m1", "c1", 100), _ensure("m2", "c2", 100))

    # Then it is a partial response listing both, not a function error
    assert _failures(response) == ["m1", "m2"]


def test_lambda_handler_release_busy_fails_the_item(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a child with surplus that stays busy through the settle policy's retries
    worker = _worker(_family(("c1", Totals(projects=1, prompts=900), FULL)))
    worker.gateway.script_not_ready("c1", 10)

    # When a release arrives / Then it is retried later (never dropped)
    assert _failures(worker.invoke(_release("m1", "c1"))) == ["m1"]
    assert worker.gateway.totals_of("c1") == Totals(projects=1, prompts=900)

    # ... and the stuck child counts toward the busy alarm, as an ensure's would
    _, data = _emf(capsys)
    assert _total(data, "AllocationRejection", "workspaceBusy") == 1
    assert _total(data, "ReleaseOutcome", "error") == 1


# ==== unmetered parents =====================================================================


def test_lambda_handler_unmetered_parent_completes_without_transfer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a parent whose ai product does not meter (limits_enabled: false)
    worker = _worker(_family(("c1", FULL, FULL), limits_enabled=False))

    # When a short child asks for more
    response = worker.invoke(_ensure("m1", "c1", 500))

    # Then nothing was carved: outcome unmetered, zero transfers, no pool read
    assert worker.gateway.transfers == []
    assert worker.gateway.calls == [(READ_RESOURCES, "c1"), (LIST_FAMILY, MASTER)]
    assert _failures(response) == []
    assert worker.outcome("req-m1").status == "unmetered"
    _, data = _emf(capsys)
    assert _total(data, "HeadroomCheck", "unmetered") == 1


def test_lambda_handler_unmetered_check_off_carves_as_before() -> None:
    # Given the same unmetered parent with the check switched off
    worker = _worker(
        _family(("c1", FULL, FULL), limits_enabled=False), SERENITY_UNMETERED_CHECK="false"
    )

    # When a short child asks for more / Then it is topped up as usual
    worker.invoke(_ensure("m1", "c1", 100))
    assert worker.outcome("req-m1").status == "topped-up"
    # (the one family listing is the parent check, made whatever the metering switch says)
    assert worker.gateway.calls_of(LIST_FAMILY) == ["ws-master"]


# ==== sibling reclaim =======================================================================


def _reclaim_family() -> InMemoryGateway:
    # The pool is dry; two idle siblings hold surplus, one holds drafts.
    gateway = _family(
        ("c1", FULL, FULL),
        ("s-big", Totals(projects=1, prompts=1_000), FULL),
        ("s-mid", Totals(projects=1, prompts=600), Totals(projects=1, prompts=200)),
        pool_total=Totals(projects=5, prompts=100),
        pool_used=Totals(projects=5, prompts=100),
    )
    gateway.add_child(
        "s-drafting",
        MASTER,
        total=Totals(projects=1, prompts=3_000),
        drafted=Totals(projects=0, prompts=1),
    )
    return gateway


def _reclaim_worker(gateway: InMemoryGateway) -> Worker:
    return _worker(
        gateway,
        producer=True,
        SERENITY_SIBLING_RECLAIM="true",
        QUEUE_URL=QUEUE_URL,
        SIBLING_RECLAIM_MAX_PARKS="2",
        SIBLING_RECLAIM_MAX_SIBLINGS="2",
    )


def test_lambda_handler_sibling_reclaim_parks_then_serves_after_releases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a dry pool and idle siblings with surplus
    gateway = _reclaim_family()
    units = gateway.family_units(MASTER)
    worker = _reclaim_worker(gateway)

    # When an ensure arrives that the pool cannot cover even exactly
    first = worker.invoke(_ensure("m1", "c1", 250))

    # Then releases were enqueued for the two richest siblings, each in its own group, and the
    # ensure was parked (a batch item failure), not rejected
    assert _failures(first) == ["m1"]
    assert worker.producer is not None
    releases = worker.producer.many
    assert [(r.workspace_id, r.kind) for r in releases] == [
        ("s-big", "release"),
        ("s-mid", "release"),
    ]
    assert all(isinstance(r, ReleaseRequest) and r.source == "reclaim" for r in releases)
    assert worker.outcomes is not None and worker.outcomes.published == []

    # When the sibling releases are applied by the worker (their own groups)
    applied = worker.invoke(
        *(
            sqs_record(
                r.model_dump_json(), message_id=f"rel-{r.workspace_id}", group_id=r.workspace_id
            )
            for r in releases
        )
    )

    # Then the siblings gave back down to used (never under used or floor)
    assert _failures(applied) == []
    assert gateway.totals_of("s-big") == FULL
    assert gateway.totals_of("s-mid") == Totals(projects=1, prompts=200)
    assert gateway.totals_of("s-drafting") == Totals(projects=1, prompts=3_000)

    # When the parked ensure is redelivered
    served = worker.invoke(_ensure("m1", "c1", 250, receive_count=2))

    # Then it is served and says so; units were conserved throughout
    assert _failures(served) == []
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.totals_after) == (
        "topped-up-after-reclaim",
        Totals(projects=1, prompts=400),
    )
    assert gateway.family_units(MASTER) == units
    _, data = _emf(capsys)
    assert _total(data, "SiblingReclaim", "enqueued") == 2
    assert _total(data, "SiblingReclaim", "parked") == 1
    assert _total(data, "SiblingReclaim", "served") == 1
    # ... and the park was a wait, not a rejection: the request was served in the end
    assert _total(data, "AllocationRejection", "orgPoolExhausted") == 0


def test_lambda_handler_sibling_reclaim_rejects_after_max_parks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a dry pool whose sibling releases never get applied
    worker = _reclaim_worker(_reclaim_family())

    # When the ensure comes back for a third time (SIBLING_RECLAIM_MAX_PARKS = 2)
    responses = [worker.invoke(_ensure("m1", "c1", 250, receive_count=n)) for n in (1, 2, 3)]

    # Then it was parked twice and then rejected for pool exhaustion
    assert [_failures(r) for r in responses] == [["m1"], ["m1"], []]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")
    assert worker.producer is not None and len(worker.producer.batches) == 2
    _, data = _emf(capsys)
    assert _total(data, "SiblingReclaim", "exhausted") == 1
    # ... and one rejection, for the receive that ended rejected (not for the two parks)
    assert _total(data, "AllocationRejection", "orgPoolExhausted") == 1


def test_lambda_handler_parked_on_final_receive_records_pool_exhausted() -> None:
    # Given reclaim allowed on every receive, up to the last one before the DLQ
    worker = _worker(
        _reclaim_family(),
        producer=True,
        SERENITY_SIBLING_RECLAIM="true",
        QUEUE_URL=QUEUE_URL,
        SIBLING_RECLAIM_MAX_PARKS=str(MAX_RECEIVE_COUNT),
    )

    # When the ensure is parked on its final receive
    response = worker.invoke(_ensure("m1", "c1", 250, receive_count=MAX_RECEIVE_COUNT))

    # Then its terminal outcome is the pool exhaustion it was waiting out, and it still fails
    assert _failures(response) == ["m1"]
    outcome = worker.outcome("req-m1")
    assert (outcome.status, outcome.error_code) == ("rejected", "orgPoolExhausted")


def test_lambda_handler_sibling_reclaim_nothing_to_reclaim_rejects_at_once() -> None:
    # Given a dry pool and no sibling with surplus
    worker = _reclaim_worker(
        _family(
            ("c1", FULL, FULL),
            ("s-lean", FULL, FULL),
            pool_total=Totals(projects=5, prompts=100),
            pool_used=Totals(projects=5, prompts=100),
        )
    )

    # When the ensure arrives / Then it is rejected, nothing enqueued
    assert _failures(worker.invoke(_ensure("m1", "c1", 250))) == []
    assert worker.outcome("req-m1").error_code == "orgPoolExhausted"
    assert worker.producer is not None and worker.producer.batches == []


def test_lambda_handler_sibling_reclaim_off_by_default_rejects() -> None:
    # Given the default settings (reclaim off) and a dry pool with rich siblings
    worker = _worker(_reclaim_family(), producer=True)

    # When the ensure arrives / Then plain rejection, nothing enqueued
    worker.invoke(_ensure("m1", "c1", 250))
    assert worker.outcome("req-m1").error_code == "orgPoolExhausted"
    assert worker.producer is not None and worker.producer.batches == []


# ==== pool early warning ====================================================================


def test_lambda_handler_pool_low_warning_published_once_per_interval() -> None:
    # Given a pool at 20 % free, a 50 % threshold and a 600 s interval
    gateway = _family(
        *((f"c{i}", FULL, FULL) for i in range(1, 5)),
        pool_total=Totals(projects=50, prompts=2_000),
        pool_used=Totals(projects=0, prompts=1_600),
    )
    worker = _worker(gateway, POOL_LOW_RATIO="0.5", POOL_LOW_INTERVAL_S="600")
    assert worker.outcomes is not None

    # When two top-ups run in one batch, then one more a minute later
    worker.invoke(_ensure("m1", "c1", 100), _ensure("m2", "c2", 100))
    worker.clock.advance(60)
    worker.invoke(_ensure("m3", "c3", 100))

    # Then one warning was published for the pool, not one per read
    assert len(worker.outcomes.pool_low) == 1
    warning = worker.outcomes.pool_low[0]
    assert warning["parent_workspace_id"] == MASTER
    assert warning["dim"] == "prompts"
    assert warning["free"] == 400
    assert warning["free_ratio"] == pytest.approx(0.2)

    # When the interval has passed and the pool is read again
    worker.clock.advance(600)
    worker.invoke(_ensure("m4", "c4", 100))

    # Then a second warning, now with a drain estimate and a time to exhaustion
    assert len(worker.outcomes.pool_low) == 2
    later = worker.outcomes.pool_low[1]
    assert later["drain_units_per_hour"] > 0
    assert later["projected_seconds_to_exhaustion"] > 0


def test_lambda_handler_pool_low_publish_failure_never_fails_requests() -> None:
    # Given a bus that refuses pool-low events
    worker = _worker(
        _family(
            ("c1", FULL, FULL),
            pool_total=Totals(projects=50, prompts=1_000),
            pool_used=Totals(projects=0, prompts=900),
        ),
        outcomes=RecordingOutcomes(fail_pool_low=True),
        POOL_LOW_RATIO="0.5",
    )

    # When a top-up reads the low pool / Then the request still completes
    assert _failures(worker.invoke(_ensure("m1", "c1", 50))) == []
    assert worker.outcome("req-m1").status == "topped-up"


# ==== outcome publishing ====================================================================


def test_lambda_handler_outcome_publish_failure_fails_the_messages() -> None:
    # Given a bus that refuses every publish
    worker = _worker(
        _family(
            ("c1", Totals(projects=1, prompts=500), FULL),
            ("c2", Totals(projects=1, prompts=500), FULL),
        ),
        outcomes=RecordingOutcomes(fail_calls=range(1, 10)),
    )

    # When two completed messages cannot announce their outcome
    response = worker.invoke(_ensure("m1", "c1", 10), _ensure("m2", "c2", 10))

    # Then both are failed so SQS redelivers them (an outcome is never silently lost)
    assert _failures(response) == ["m1", "m2"]


def _twelve_message_batch() -> tuple[InMemoryGateway, list[dict[str, Any]]]:
    """m1 on c1, m2..m10 on x2..x10, then m11 on c1 and m12 on x2 (both releases)."""
    roomy = Totals(projects=1, prompts=500)
    children = [("c1", roomy, FULL)] + [(f"x{i}", roomy, FULL) for i in range(2, 11)]
    records = [_ensure("m1", "c1", 10)]
    records += [_ensure(f"m{i}", f"x{i}", 10) for i in range(2, 11)]
    records += [_release("m11", "c1"), _release("m12", "x2")]
    return _family(*children), records


def test_lambda_handler_unpublished_outcomes_fail_only_from_there_on_in_their_group() -> None:
    # Given twelve outcomes (two PutEvents chunks) and a bus refusing the second chunk
    gateway, records = _twelve_message_batch()
    worker = _worker(gateway, outcomes=RecordingOutcomes(fail_calls=[2]))

    # When the batch completes
    response = worker.invoke(*records)

    # Then only the messages whose outcome was lost fail; earlier messages of the same groups
    # were announced already and must not be applied (and announced) a second time
    assert _failures(response) == ["m11", "m12"]


def test_lambda_handler_unpublished_outcome_also_fails_later_messages_of_its_group() -> None:
    # Given the same batch and a bus refusing the first chunk only
    gateway, records = _twelve_message_batch()
    worker = _worker(gateway, outcomes=RecordingOutcomes(fail_calls=[1]))

    # When the batch completes
    response = worker.invoke(*records)

    # Then m1..m10 fail, and so do m11 and m12: a later message of a group whose earlier one
    # is redelivered must wait for it (FIFO order), even though its own outcome went out
    assert _failures(response) == [f"m{i}" for i in range(1, 13)]


# ==== EMF ===================================================================================

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
COLD_START = "ColdStart"
"""Powertools' own metric (capture_cold_start_metric), the one name outside the catalog."""


def test_lambda_handler_emf_matches_the_catalog_and_carries_no_ids(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a batch that exercises most metrics: hot path, coalesced top-up after a not-ready
    # retry, a brand-limit refusal, a release, an invalid message and a busy child
    gateway = _family(
        ("c-hot", Totals(projects=1, prompts=500), FULL),
        ("c-top", FULL, FULL),
        ("c-limit", FULL, FULL),
        ("c-rel", Totals(projects=1, prompts=900), FULL),
        ("c-busy", FULL, FULL),
        pool_total=Totals(projects=50, prompts=2_000),
        pool_used=Totals(projects=0, prompts=1_950),
    )
    gateway.script_not_ready("c-top", 1)
    gateway.script_not_ready("c-busy", 10)
    worker = _worker(gateway)
    records = [
        _ensure("m1", "c-hot", 10),
        _ensure("m2", "c-top", 20),
        _ensure("m3", "c-top", 20),
        _ensure("m4", "c-limit", 500, ceiling=Totals(projects=1, prompts=300)),
        _release("m5", "c-rel"),
        sqs_record("{oops", message_id="m6", group_id="c-bad"),
        _ensure("m7", "c-busy", 20),
    ]
    ids = {"c-hot", "c-top", "c-limit", "c-rel", "c-busy", "c-bad", MASTER}
    ids |= {r["messageId"] for r in records} | {f"req-{r['messageId']}" for r in records}

    # When the batch runs and the printed EMF is parsed
    worker.invoke(*records)
    blobs, data = _emf(capsys)

    # Then every metric is in the catalog with its unit and exactly its dimensions
    assert blobs, "no EMF printed"
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == NAMESPACE
    seen = set()
    for datum in data:
        dims = datum.dimensions
        # ... and no dimension value is an id of any kind
        for value in dims.values():
            assert value not in ids, (datum.name, value)
            assert not _UUID.search(value), (datum.name, value)
        if datum.name == COLD_START:
            continue
        spec = METRIC_CATALOG[datum.name]
        expected = {"service", "Environment"} | ({spec.dimension} if spec.dimension else set())
        assert set(dims) == expected, datum
        assert dims["service"] == SERVICE
        assert dims["Environment"] == ENVIRONMENT
        assert datum.unit == spec.unit, datum
        if spec.dimension:
            assert dims[spec.dimension] in spec.values, datum
        seen.add(datum.name)

    # ... and the batch's business events were all there, with the right values
    assert {
        "HeadroomCheck",
        "TopUpLatencyMs",
        "PoolFreeRatio",
        "AllocationRejection",
        "NotReadyRetry",
        "ReleaseOutcome",
        "InvalidMessage",
        "CoalescedEnsures",
        "QueueLagMs",
    } <= seen
    assert _total(data, "HeadroomCheck", "hot-path") == 1
    # a top-up is counted when attempted: c-top's combined one and c-busy's refused one
    assert _total(data, "HeadroomCheck", "topped-up") == 2
    assert _total(data, "AllocationRejection", "brandAiLimit") == 1
    assert _total(data, "AllocationRejection", "workspaceBusy") == 1
    assert _total(data, "ReleaseOutcome", "released") == 1
    assert _total(data, "InvalidMessage") == 1
    assert _total(data, "CoalescedEnsures") == 1
    assert _total(data, "NotReadyRetry") == 3  # c-top once, c-busy through both retries
    lags = [v for d in data if d.name == "QueueLagMs" for v in d.values]
    assert lags and set(lags) == {QUEUE_LAG_MS}
    ratios = [v for d in data if d.name == "PoolFreeRatio" for v in d.values]
    assert all(0 <= v <= 100 for v in ratios)
    assert _total(data, "TopUpLatencyMs", "settle") >= 0
    assert any(d.name == "TopUpLatencyMs" and d.dimensions["Path"] == "fail-fast" for d in data)


def test_lambda_handler_no_token_in_any_output(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a worker configured with a loopback token, serving a top-up and a failure
    worker = _worker(_family(("c1", FULL, FULL), ("c2", FULL, FULL)))
    worker.gateway.script_errors(READ_RESOURCES, "c2", [UpstreamError(500, "boom", "read")])

    # When a batch runs
    worker.invoke(_ensure("m1", "c1", 100), _ensure("m2", "c2", 100))

    # Then the token never appears in what was printed, published or dead-lettered
    captured = capsys.readouterr()
    assert BASE_ENV["SEMRUSH_TOKEN"] not in captured.out + captured.err
    assert worker.outcomes is not None
    assert all(
        BASE_ENV["SEMRUSH_TOKEN"] not in o.model_dump_json() for o in worker.outcomes.published
    )


def test_lambda_handler_status_reads_only_on_the_settle_path() -> None:
    # Given a top-up and a release / When both run
    worker = _worker(_family(("c1", FULL, FULL), ("c2", Totals(projects=1, prompts=900), FULL)))
    worker.invoke(_ensure("m1", "c1", 100), _release("m2", "c2"))

    # Then the fail-fast ensure never polled status; the settle release did
    assert worker.gateway.calls_of(READ_STATUS) == ["c2"]


# ==== the invocation's deadline =============================================================

SAFETY_MARGIN_S = 3.0
"""AllocatorSettings' default SAFETY_MARGIN_MS."""


def test_lambda_handler_outcome_that_cannot_be_published_in_time_fails_before_publishing() -> None:
    # Given a child whose one read takes 45 s of a 60 s invocation: the 57 s left before the
    # safety margin then has room for the read but not for a publish call's worst case
    clock = FakeClock()
    gateway = InMemoryGateway(clock=clock, latency_s=45.0)
    gateway.add_master(MASTER, total=Totals(projects=50, prompts=10_000))
    gateway.add_child("c1", MASTER, total=Totals(projects=1, prompts=500), used=FULL)
    worker = _worker(gateway, clock=clock)
    assert 45.0 + AWS_CALL_BUDGET_S > 60.0 - SAFETY_MARGIN_S

    # When the batch runs
    response = worker.invoke(_ensure("m1", "c1", 10), remaining_ms=60_000)

    # Then the record fails deliberately, with no publish attempted: SQS brings it back
    # instead of the function timing out after announcing it
    assert _failures(response) == ["m1"]
    assert worker.outcomes is not None
    assert (worker.outcomes.publish_calls, worker.outcomes.published) == (0, [])


def test_lambda_handler_publishes_when_the_call_still_fits() -> None:
    # Given the same child with a 30 s read: 30 s + one publish call fits in 57 s
    clock = FakeClock()
    gateway = InMemoryGateway(clock=clock, latency_s=30.0)
    gateway.add_master(MASTER, total=Totals(projects=50, prompts=10_000))
    gateway.add_child("c1", MASTER, total=Totals(projects=1, prompts=500), used=FULL)
    worker = _worker(gateway, clock=clock)
    assert 30.0 + AWS_CALL_BUDGET_S <= 60.0 - SAFETY_MARGIN_S

    # When the batch runs / Then it completes and its outcome is published
    assert _failures(worker.invoke(_ensure("m1", "c1", 10), remaining_ms=60_000)) == []
    assert worker.outcome("req-m1").status == "hot-path"


def test_lambda_handler_dead_letter_send_that_cannot_fit_fails_the_record() -> None:
    # Given 20 s left: after the margin and the time kept for publishing, a DLQ send (whose
    # worst case is AWS_CALL_BUDGET_S) no longer fits while applying
    worker = _worker(_family(("c1", FULL, FULL)))
    assert 20.0 - SAFETY_MARGIN_S - AWS_CALL_BUDGET_S < AWS_CALL_BUDGET_S

    # When an invalid message arrives
    response = worker.invoke(
        sqs_record("{oops", message_id="m1", group_id="c1"), remaining_ms=20_000
    )

    # Then it is not sent half-way: the record fails and comes back on a fresher invocation
    assert _failures(response) == ["m1"]
    assert worker.dead_letters is not None and worker.dead_letters.sent == []


def test_lambda_handler_upstream_work_stops_where_publishing_time_begins() -> None:
    # Given 30 s left: 27 s before the margin would fit a fail-fast transfer (15 s budget), but
    # the last AWS_CALL_BUDGET_S of them are kept for publishing, and 11 s do not
    worker = _worker(_family(("c1", FULL, FULL)))
    assert 30.0 - SAFETY_MARGIN_S >= 15.0 > 30.0 - SAFETY_MARGIN_S - AWS_CALL_BUDGET_S

    # When a top-up is needed
    response = worker.invoke(_ensure("m1", "c1", 100), remaining_ms=30_000)

    # Then no transfer was sent; the record fails as out of time and comes back
    assert _failures(response) == ["m1"]
    assert worker.gateway.transfers == []
