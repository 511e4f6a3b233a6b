"""The sweep CLI's invokers: the deployed function, the state machine's history, in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serenity_tools.operator import sweep_invokers
from serenity_tools.operator.sweep_cli import (
    LambdaInvoker,
    LocalInvoker,
    StateMachineInvoker,
    SweepInvocationError,
    drive_sweep,
)
from tests.tools.operator.test_sweep_cli import THREE_BATCHES, item, result


class FakeStreamingBody:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self) -> bytes:
        return self._data


class FakeLambda:
    """Answers ``invoke`` like boto3's Lambda client, from a script of (payload, error) pairs."""

    def __init__(self, answers: list[tuple[Any, str | None]]) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        body, function_error = self.answers.pop(0)
        answer: dict[str, Any] = {
            "StatusCode": 200,
            "Payload": FakeStreamingBody(json.dumps(body).encode("utf-8")),
        }
        if function_error is not None:
            answer["FunctionError"] = function_error
        return answer


def test_lambda_invoker_invokes_synchronously_and_returns_the_result() -> None:
    client = FakeLambda([(THREE_BATCHES[0], None)])
    invoker = LambdaInvoker("serenity-allocator-dev-sweep", client)
    assert invoker.invoke({"parent_workspace_ids": ["m1"]}) == THREE_BATCHES[0]
    (call,) = client.calls
    assert call["FunctionName"] == "serenity-allocator-dev-sweep"
    assert call["InvocationType"] == "RequestResponse"
    assert json.loads(call["Payload"]) == {"parent_workspace_ids": ["m1"]}


def test_lambda_invoker_function_error_raises_with_lambdas_error_payload() -> None:
    error = {"errorType": "SweepRefusedError", "errorMessage": "kill switch off", "stackTrace": []}
    invoker = LambdaInvoker("f", FakeLambda([(error, "Unhandled")]))
    with pytest.raises(SweepInvocationError) as raised:
        invoker.invoke({})
    assert raised.value.payload == error


def test_lambda_invoker_refuses_an_answer_that_is_not_a_sweep_result() -> None:
    invoker = LambdaInvoker("f", FakeLambda([({"statusCode": 200}, None)]))
    with pytest.raises(SweepInvocationError, match="InvalidSweepResult"):
        invoker.invoke({})


def test_local_invoker_gives_each_batch_a_fresh_context_and_wraps_handler_errors() -> None:
    # Given a handler that answers once, then raises
    contexts: list[Any] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        contexts.append(context)
        if len(contexts) == 2:
            raise ValueError("invalid sweep payload: limit: Input should be a valid integer")
        return THREE_BATCHES[0]

    invoker = LocalInvoker(handler, timeout_s=900, clock=lambda: 100.0)
    # When it is invoked twice
    assert invoker.invoke({}) == THREE_BATCHES[0]
    with pytest.raises(SweepInvocationError) as raised:
        invoker.invoke({})
    # Then each call was a new invocation with the Sweep function's budget
    assert contexts[0].aws_request_id != contexts[1].aws_request_id
    assert contexts[0].function_name == "SweepFunction"
    assert contexts[0].get_remaining_time_in_millis() == 900_000
    # And the error has Lambda's shape
    assert raised.value.payload == {
        "errorType": "ValueError",
        "errorMessage": "invalid sweep payload: limit: Input should be a valid integer",
    }


def _history_events(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History events of a lambda:invoke Task per result, with the states around it."""
    events: list[dict[str, Any]] = [{"id": 1, "type": "ExecutionStarted"}]
    for batch in results:
        output = {"ExecutedVersion": "$LATEST", "Payload": batch, "StatusCode": 200}
        events += [
            {"id": len(events) + 1, "type": "TaskScheduled"},
            {
                "id": len(events) + 2,
                "type": "TaskSucceeded",
                "taskSucceededEventDetails": {
                    "resourceType": "lambda",
                    "resource": "invoke",
                    "output": json.dumps(output),
                },
            },
            {
                "id": len(events) + 3,
                "type": "TaskStateExited",
                "stateExitedEventDetails": {"name": "SweepBatch", "output": "{}"},
            },
        ]
    return events


class FakeStepFunctions:
    """A state machine execution that moves one scripted step per DescribeExecution.

    Each step is (status, results so far, error, cause); the history is paginated two events
    per page so the invoker has to follow ``nextToken``.
    """

    def __init__(self, steps: list[tuple[str, list[dict[str, Any]], str | None, str | None]]):
        self.steps = steps
        self.step = -1
        self.started: list[dict[str, Any]] = []

    def start_execution(self, **kwargs: Any) -> dict[str, Any]:
        self.started.append(kwargs)
        return {"executionArn": "arn:aws:states:us-east-1:123456789012:execution:sweep:x1"}

    def describe_execution(self, **kwargs: Any) -> dict[str, Any]:
        self.step = min(self.step + 1, len(self.steps) - 1)
        status, _, error, cause = self.steps[self.step]
        answer: dict[str, Any] = {"executionArn": kwargs["executionArn"], "status": status}
        if error is not None:
            answer |= {"error": error, "cause": cause}
        return answer

    def get_execution_history(self, **kwargs: Any) -> dict[str, Any]:
        events = _history_events(self.steps[self.step][1])
        start = int(kwargs.get("nextToken") or 0)
        page: dict[str, Any] = {"events": events[start : start + 2]}
        if start + 2 < len(events):
            page["nextToken"] = str(start + 2)
        return page


def test_state_machine_invoker_follows_the_execution_to_the_end(tmp_path: Path) -> None:
    # Given an execution whose history gains a batch result now and then
    first, second, last = THREE_BATCHES
    client = FakeStepFunctions(
        [
            ("RUNNING", [], None, None),
            ("RUNNING", [first], None, None),
            ("RUNNING", [first], None, None),
            ("RUNNING", [first], None, None),
            ("SUCCEEDED", [first, second, last], None, None),
        ]
    )
    sleeps: list[float] = []
    notes: list[str] = []
    invoker = StateMachineInvoker(
        "arn:aws:states:us-east-1:123456789012:stateMachine:sweep",
        client,
        poll_interval_s=5.0,
        sleep=sleeps.append,
        notify=notes.append,
    )
    payload = {"dry_run": True, "parent_workspace_ids": ["m1"]}

    # When the loop follows it
    run = drive_sweep(invoker, payload)

    # Then it started one execution with the payload as input, and saw every batch in order
    assert [json.loads(s["input"]) for s in client.started] == [payload]
    assert notes == [f"started execution {invoker.execution_arn}"]
    assert [r["processed"] for r in run.results] == [2, 4, 5]
    assert run.succeeded
    # And it polled, waiting its interval whenever nothing new had appeared
    assert sleeps == [5.0, 5.0, 5.0]


def test_state_machine_invoker_failed_execution_without_a_result_raises_its_error() -> None:
    client = FakeStepFunctions(
        [
            ("RUNNING", [THREE_BATCHES[0]], None, None),
            ("FAILED", [THREE_BATCHES[0]], "RunInProgressError", '{"errorMessage": "busy"}'),
        ]
    )
    invoker = StateMachineInvoker("arn:sm", client, sleep=lambda _: None)
    run = drive_sweep(invoker, {"parent_workspace_ids": ["m1"]})
    assert len(run.results) == 1
    assert run.error == {
        "errorType": "RunInProgressError",
        "errorMessage": '{"errorMessage": "busy"}',
        "executionArn": invoker.execution_arn,
    }


def test_state_machine_invoker_aborted_execution_ends_on_its_last_result() -> None:
    aborted = result([item("c1", "unexpected-error")], processed=1, total=3, aborted=True,
                     unexpected_errors=1)  # fmt: skip
    client = FakeStepFunctions([("FAILED", [aborted], "SweepAborted", "Too many errors")])
    invoker = StateMachineInvoker("arn:sm", client, sleep=lambda _: None)
    run = drive_sweep(invoker, {"parent_workspace_ids": ["m1"]})
    assert (run.aborted, run.error, run.status) == (True, None, "aborted")


@pytest.mark.parametrize(
    "event",
    [
        {"type": "TaskSucceeded", "taskSucceededEventDetails": {"output": "not json"}},
        {"type": "TaskSucceeded", "taskSucceededEventDetails": {"output": '{"Payload": 1}'}},
        {"type": "ExecutionStarted", "executionStartedEventDetails": {"input": "{}"}},
    ],
)
def test_history_events_without_a_sweep_result_are_ignored(event: dict[str, Any]) -> None:
    assert sweep_invokers.result_of_event(event) is None


def test_history_lambda_function_succeeded_event_carries_the_result_itself() -> None:
    event = {
        "type": "LambdaFunctionSucceeded",
        "lambdaFunctionSucceededEventDetails": {"output": json.dumps(THREE_BATCHES[2])},
    }
    assert sweep_invokers.result_of_event(event) == THREE_BATCHES[2]
