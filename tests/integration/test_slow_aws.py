"""The worker under a slow AWS endpoint: a delaying proxy in front of moto, on loopback.

Every AWS call the worker makes has bounded timeouts and retries sized to the function, and is
only started when its worst case still fits the invocation. So a slow DLQ or a slow event bus
costs the records that needed it, never the whole batch, and the invocation ends in time.

No test here reads the machine's clock: the function's deadline runs on a clock the proxy moves
by a call's whole budget each time it holds one, so which calls fit is exact on any machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import FUNCTION_TIMEOUT_S, AllocatorHarness
from tests.integration.slow_aws_proxy import FunctionClock, SlowProxy, target_is
from tests.integration.slow_worker import (
    HoldAwsCalls,
    enqueue_a_small_ensure_each,
    seed_roomy_children,
    worker_on_the_function_clock,
)
from tests.integration.sqs_events import failed_ids, receive_messages

MASTER = "ws-slow-master"
CHILDREN = ("ws-slow-a", "ws-slow-b")
SHORT_FUNCTION_S = 6.0


@pytest.fixture
def slow_dlq(local_resources: LocalResources, hold_aws_calls: HoldAwsCalls) -> Iterator[SlowProxy]:
    """SQS through the proxy; SendMessage to the DLQ held for HOLD_S."""
    dlq_name = local_resources.dlq_url.rsplit("/", 1)[-1]
    held = target_is("AmazonSQS.SendMessage", body_contains=dlq_name)
    with hold_aws_calls("AWS_ENDPOINT_URL_SQS", held) as proxy:
        yield proxy


@pytest.fixture
def slow_bus(hold_aws_calls: HoldAwsCalls) -> Iterator[SlowProxy]:
    """EventBridge through the proxy; every PutEvents held for HOLD_S."""
    with hold_aws_calls("AWS_ENDPOINT_URL_EVENTBRIDGE", target_is("AWSEvents.PutEvents")) as proxy:
        yield proxy


@pytest.fixture
def worker(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    function_clock: FunctionClock,
) -> Iterator[AllocatorHarness]:
    """The production runtime with a 2 s per-call budget, on the function's clock."""
    with worker_on_the_function_clock(local_resources, sim, function_clock) as harness:
        yield harness


def _run_batch(
    worker: AllocatorHarness, clock: FunctionClock, timeout_s: float
) -> tuple[list[str], list[str]]:
    """Receive and handle one batch with ``timeout_s`` to live on ``clock``.

    Returns the received message ids and the ids the handler reported as failed (the handler
    returning at all is what Lambda needs: a function killed at its timeout reports nothing
    and the whole batch comes back).
    """
    messages = receive_messages(worker.sqs, worker.resources.queue_url)
    _, response = worker.run_handler(messages, timeout_s=timeout_s, clock=clock)
    return [m["MessageId"] for m in messages], failed_ids(response)


def test_slow_dlq_fails_only_the_invalid_record_and_the_batch_completes(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    slow_dlq: SlowProxy,
    outcome_capture: OutcomeCapture,
    function_clock: FunctionClock,
) -> None:
    # Given a valid ensure and an invalid message in another group, and a DLQ that answers
    # only after HOLD_S
    seed_roomy_children(sim, MASTER, CHILDREN)
    request_id = worker.producer.enqueue_ensure(CHILDREN[0], MASTER, {"prompts": 10})
    invalid_id = worker.send_raw("{not json", group_id=CHILDREN[1], dedup_id="d-slow-invalid")

    # When the batch runs with the template's 60 s to live
    received, failed = _run_batch(worker, function_clock, FUNCTION_TIMEOUT_S)

    # Then only the invalid record failed and comes back: its one DLQ send gave up before the
    # proxy answered (botocore's default 60 s read would have waited and succeeded), and was not
    # retried; the ensure in the other group completed and its outcome went out
    assert len(received) == 2
    assert failed == [invalid_id]
    assert slow_dlq.held == ["AmazonSQS.SendMessage"]
    assert function_clock.charged_at == [0.0]
    assert [(o["request_id"], o["status"]) for o in outcome_capture.outcomes()] == [
        (request_id, "hot-path")
    ]


def test_slow_bus_fails_the_records_early_and_ends_before_the_timeout(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    slow_bus: SlowProxy,
    function_clock: FunctionClock,
) -> None:
    # Given two hot-path ensures in two groups, an event bus that answers only after HOLD_S,
    # and a function with SHORT_FUNCTION_S to live
    seed_roomy_children(sim, MASTER, CHILDREN)
    enqueue_a_small_ensure_each(worker, MASTER, CHILDREN)

    # When the batch runs
    received, failed = _run_batch(worker, function_clock, SHORT_FUNCTION_S)

    # Then the handler returned (no function timeout) and failed exactly the records whose
    # outcome was not published; the one publish was started at once, while its whole budget
    # still fitted before the deadline less the safety margin, and was not retried
    assert len(received) == len(CHILDREN)
    assert sorted(failed) == sorted(received)
    assert slow_bus.held == ["AWSEvents.PutEvents"]
    assert function_clock.charged_at == [0.0]
