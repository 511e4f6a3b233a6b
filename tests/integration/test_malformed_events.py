"""Hand-made events: one clear problem per unusable record (or for the event), never a crash.

A real event source mapping never sends these; a test invoke or an operator's replay can. The
handler must not lose the rest of the batch to one bad record, nor raise a traceback.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.sqs import REASON_ATTRIBUTE
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.resources import LOCAL_REGION, LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import (
    FUNCTION_NAME,
    FUNCTION_TIMEOUT_S,
    AllocatorHarness,
    allocator_harness,
    api_calls,
    workspace,
)
from tests.integration.sqs_events import build_sqs_event

MASTER = "ws-master"
CHILD = "ws-child-a"


@pytest.fixture
def worker(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> Iterator[AllocatorHarness]:
    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            # Room in both dimensions (two projects to spare): a small ensure is a hot path.
            workspace(CHILD, parent_id=MASTER, projects=(1, 3), prompts=(100, 500)),
        ]
    )
    with allocator_harness(local_resources, sim) as harness:
        yield harness


def _call(worker: AllocatorHarness, event: Any) -> dict[str, Any]:
    context = LocalLambdaContext(FUNCTION_NAME, FUNCTION_TIMEOUT_S)
    response: dict[str, Any] = lambda_handler(event, context, runtime=worker.runtime)
    return response


def _problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        str(getattr(record, "problem", ""))
        for record in caplog.records
        if record.getMessage() == "malformed SQS event"
    ]


def _real_event(worker: AllocatorHarness) -> dict[str, Any]:
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 100})
    return build_sqs_event(
        worker.receive(), queue_arn=worker.resources.queue_arn, region=LOCAL_REGION
    )


@pytest.mark.parametrize("event", [{}, {"Records": None}, {"Records": []}, {"Records": "x"}])
def test_lambda_handler_event_without_records_answers_with_no_failures(
    worker: AllocatorHarness, event: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # Given an event with no usable Records / When the handler gets it
    response = _call(worker, event)

    # Then it answers without raising, says what is wrong (except for an empty list), and
    # calls nobody
    assert response == {"batchItemFailures": []}
    problems = _problems(caplog)
    expected = [] if event == {"Records": []} else ["Records: missing or not a list"]
    assert problems == expected
    assert api_calls(worker.sim) == []


def test_lambda_handler_skips_records_that_cannot_be_records_and_applies_the_rest(
    worker: AllocatorHarness, outcome_capture: OutcomeCapture, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a real record between an empty object, a non-object and a second copy of its id
    event = _real_event(worker)
    real = event["Records"][0]
    event["Records"] = [{}, real, "junk", copy.deepcopy(real)]

    # When the handler gets it
    response = _call(worker, event)

    # Then the real record is applied once, and each unusable record is named once
    assert response == {"batchItemFailures": []}
    assert [o["status"] for o in outcome_capture.outcomes()] == ["hot-path"]
    problems = _problems(caplog)
    assert problems == [
        "Records[0]: messageId: missing or not a string",
        "Records[2]: not an object",
        "Records[3]: messageId: repeats an earlier record (that copy is processed)",
    ]


def test_lambda_handler_record_with_a_malformed_receive_count_goes_to_the_dlq_named(
    worker: AllocatorHarness, outcome_capture: OutcomeCapture
) -> None:
    # Given a real record whose ApproximateReceiveCount is "abc"
    event = _real_event(worker)
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "abc"

    # When the handler gets it
    response = _call(worker, event)

    # Then the record completes as invalid, with the field named on its DLQ copy, and nothing
    # reached Semrush
    assert response == {"batchItemFailures": []}
    [dead] = worker.drain_dlq()
    assert dead["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] == (
        "attributes.ApproximateReceiveCount: not a positive integer"
    )
    assert api_calls(worker.sim) == []
    # And its request id is readable, so it is announced as invalid and dead-lettered
    [announced] = outcome_capture.outcomes()
    assert announced["request_id"] == json.loads(event["Records"][0]["body"])["request_id"]
    assert (announced["status"], announced["error_code"], announced["dead_lettered"]) == (
        "invalid",
        "invalidMessage",
        True,
    )
