"""The worker under a slow request ledger: a delaying proxy in front of moto's DynamoDB.

Every ledger write is bounded like every other AWS call, and is only started when its worst
case still fits the invocation, so a slow ledger costs the records that needed it, never the
whole batch, and the invocation ends before the function's timeout.

The function's deadline runs on a clock the proxy moves by a call's whole budget each time it
holds one, so which writes fit is exact on any machine; no test reads the machine's clock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import (
    DynamoDbRequestLedger,
    RequestLedgerConfig,
)
from serenity_allocator.handlers import allocator
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import AllocatorHarness
from tests.integration.slow_aws_proxy import (
    FunctionClock,
    SlowProxy,
    never,
    slow_proxy,
    target_is,
    unprocessed_batch_get,
)
from tests.integration.slow_worker import (
    CALL_BUDGET_S,
    HoldAwsCalls,
    enqueue_a_small_ensure_each,
    seed_roomy_children,
    worker_on_the_function_clock,
)
from tests.integration.sqs_events import failed_ids, receive_messages

MASTER = "ws-ledger-master"
CHILDREN = tuple(f"ws-ledger-{i}" for i in range(6))
SHORT_FUNCTION_S = 8.0


@pytest.fixture
def slow_ledger_writes(hold_aws_calls: HoldAwsCalls) -> Iterator[SlowProxy]:
    """DynamoDB through the proxy; every UpdateItem held for HOLD_S (reads pass at once)."""
    held = target_is("DynamoDB_20120810.UpdateItem")
    with hold_aws_calls("AWS_ENDPOINT_URL_DYNAMODB", held) as proxy:
        yield proxy


@pytest.fixture
def worker(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    function_clock: FunctionClock,
) -> Iterator[AllocatorHarness]:
    """The production runtime with a ledger, a 2 s per-call budget and allocation off."""
    overrides = {
        "REQUEST_LEDGER_TABLE": local_resources.ledger_table,
        # Kill switch off: an ensure completes with no upstream call, so nothing but the
        # ledger's own deadline check stands between one slow write and the next.
        "SERENITY_DYNAMIC_ALLOCATION": "false",
    }
    with worker_on_the_function_clock(local_resources, sim, function_clock, overrides) as harness:
        yield harness


def test_slow_ledger_fails_records_early_and_ends_before_the_timeout(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    slow_ledger_writes: SlowProxy,
    outcome_capture: OutcomeCapture,
    function_clock: FunctionClock,
) -> None:
    # Given six ensures in six groups (each a "disabled" no-op, then one ledger write), a
    # ledger whose writes answer only after HOLD_S, and a function with SHORT_FUNCTION_S to live
    seed_roomy_children(sim, MASTER, CHILDREN)
    enqueue_a_small_ensure_each(worker, MASTER, CHILDREN)
    messages = receive_messages(worker.sqs, worker.resources.queue_url)
    assert len(messages) == len(CHILDREN)

    # When the batch runs
    _, response = worker.run_handler(messages, timeout_s=SHORT_FUNCTION_S, clock=function_clock)

    # Then the handler returned (no function timeout) with every record failed for a retry:
    # the first two writes were started at 0 s and 2 s on the function's clock and gave up
    # (one bounded attempt each); a third would have ended at 6 s, past the 5.5 s kept for
    # applying (8 s less the margin and one publish), so the other four records failed at once
    # without a call, and no outcome went out unstored
    assert sorted(failed_ids(response)) == sorted(m["MessageId"] for m in messages)
    assert function_clock.charged_at == [0.0, 2.0]
    assert slow_ledger_writes.held == ["DynamoDB_20120810.UpdateItem"] * 2
    assert [type(info[1]).__name__ for info in allocator.processor.exceptions] == [
        "LedgerUnavailableError",
        "LedgerUnavailableError",
        *["OutOfTimeError"] * (len(CHILDREN) - 2),
    ]
    assert outcome_capture.outcomes() == []


@pytest.fixture
def throttled_lookups(
    local_resources: LocalResources, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[int]]:
    """DynamoDB through the answering proxy: every BatchGetItem leaves its keys unprocessed."""
    answer, answered = unprocessed_batch_get()
    with slow_proxy(local_resources.endpoint_url, 0.0, never, answer) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)
        yield answered


def test_a_throttled_ledger_lookup_backs_off_then_fails_the_records_before_the_timeout(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    throttled_lookups: list[int],
    outcome_capture: OutcomeCapture,
    function_clock: FunctionClock,
) -> None:
    # Given six ensures, a ledger table that throttles every read, a function with
    # SHORT_FUNCTION_S to live, and waits that move the function's clock (the top of each
    # jitter range, so they are exact)
    seed_roomy_children(sim, MASTER, CHILDREN)
    enqueue_a_small_ensure_each(worker, MASTER, CHILDREN)
    messages = receive_messages(worker.sqs, worker.resources.queue_url)
    worker.runtime.sleep = function_clock.charge
    worker.runtime.ledger = DynamoDbRequestLedger(
        worker.resources.ledger_table,
        config=RequestLedgerConfig(call_budget_s=CALL_BUDGET_S, jitter=lambda ceiling: ceiling),
    )

    # When the batch runs
    _, response = worker.run_handler(messages, timeout_s=SHORT_FUNCTION_S, clock=function_clock)

    # Then the lookup asked again after 50 ms doubling to the 1 s cap while a wait and one
    # more 2 s read still ended by 5.5 s (8 s less the margin and one publish); then every
    # record failed for a retry with its reason, nothing applied, nothing published, and the
    # handler returned with time to spare
    assert function_clock.charged_at == pytest.approx([0.0, 0.05, 0.15, 0.35, 0.75, 1.55])
    assert len(throttled_lookups) == 7
    assert sorted(failed_ids(response)) == sorted(m["MessageId"] for m in messages)
    errors = [info[1] for info in allocator.processor.exceptions]
    assert {(type(e).__name__, str(e)) for e in errors} == {
        ("LedgerUnavailableError", "unprocessed keys until the deadline")
    }
    assert len(errors) == len(CHILDREN)
    assert outcome_capture.outcomes() == []
    assert function_clock() - function_clock.start == pytest.approx(2.55)
