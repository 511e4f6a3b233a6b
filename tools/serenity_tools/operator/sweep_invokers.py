"""How the sweep CLI reaches the Sweep: the deployed function, the state machine, or in-process.

Each is a :class:`SweepInvoker`: it runs (or waits for) the next batch of a run and returns the
handler's result, or raises :class:`SweepInvocationError` with Lambda's error shape.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_stepfunctions import SFNClient

LAMBDA_MAX_TIMEOUT_S = 900.0
"""Lambda's ceiling, the Sweep function's Timeout in template.yaml, and a local batch's budget."""

LOCAL_FUNCTION_NAME = "SweepFunction"

RESULT_KEYS = ("run_id", "done", "aborted", "processed", "total", "counts", "items")
"""The keys that make a batch result (an abandon's result is told apart by ``abandoned``)."""


class SweepInvocationError(Exception):
    """One invocation failed (a function error, a failed execution, a malformed result).

    Attributes:
        payload: Lambda's error shape: ``{"errorType": ..., "errorMessage": ...}`` and whatever
            else the function returned (``stackTrace``...).
    """

    def __init__(self, payload: Mapping[str, Any]) -> None:
        self.payload = dict(payload)
        super().__init__(
            f"{self.payload.get('errorType', 'Error')}: {self.payload.get('errorMessage', '')}"
        )


class SweepInvoker(Protocol):
    """Runs the next batch of a sweep run and returns the handler's result."""

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run (or wait for) the next batch described by ``payload``; return its result.

        Raises:
            SweepInvocationError: The batch failed without a result.
        """
        ...


# ---------------------------------------------------------------- the invokers


class LambdaInvoker:
    """Invokes the deployed Sweep function synchronously, one batch per call.

    Args:
        function_name: The function's name or ARN.
        client: A ready Lambda client; otherwise one is built with a read timeout longer than
            the function's and no retries (a retried invoke would race the first one and be
            refused as "already in progress").
    """

    def __init__(self, function_name: str, client: LambdaClient | None = None) -> None:
        self._function_name = function_name
        self._client = client

    def _lambda(self) -> LambdaClient:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "lambda",
                config=Config(
                    read_timeout=int(LAMBDA_MAX_TIMEOUT_S) + 60,
                    connect_timeout=10,
                    retries={"total_max_attempts": 1},
                ),
            )
        return self._client

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Invoke once (RequestResponse) and return the function's result."""
        response = self._lambda().invoke(
            FunctionName=self._function_name,
            InvocationType="RequestResponse",
            Payload=json.dumps(payload).encode("utf-8"),
        )
        raw = response["Payload"].read()
        try:
            body: Any = json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = raw.decode("utf-8", errors="replace")
        if response.get("FunctionError"):
            if isinstance(body, dict):
                raise SweepInvocationError(body)
            raise SweepInvocationError(
                {"errorType": response["FunctionError"], "errorMessage": str(body)}
            )
        return _checked_result(body)


class StateMachineInvoker:
    """Starts the sweep state machine once and hands back each batch result it produces.

    The first :meth:`invoke` starts the execution with the payload as its input; every call
    then polls the execution history until the next Lambda result appears and returns it (the
    state machine, not this loop, decides when to invoke again).

    Args:
        state_machine_arn: The sweep state machine.
        client: A ready Step Functions client; otherwise ``boto3.client("stepfunctions")``.
        poll_interval_s: Seconds between polls of a running execution.
        sleep: Sleeps between polls; injected so tests never wait.
        notify: Told about the execution once it is started (its ARN), for the operator.
    """

    def __init__(
        self,
        state_machine_arn: str,
        client: SFNClient | None = None,
        *,
        poll_interval_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self._state_machine_arn = state_machine_arn
        self._client = client
        self._poll_interval_s = poll_interval_s
        self._sleep = sleep
        self._notify = notify
        self.execution_arn: str | None = None
        self._returned = 0

    def _sfn(self) -> SFNClient:
        if self._client is None:
            import boto3

            self._client = boto3.client("stepfunctions")
        return self._client

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Start the execution (first call), then wait for its next batch result.

        Later calls ignore ``payload``: the state machine feeds the run id back itself.
        """
        client = self._sfn()
        if self.execution_arn is None:
            started = client.start_execution(
                stateMachineArn=self._state_machine_arn, input=json.dumps(payload)
            )
            self.execution_arn = started["executionArn"]
            if self._notify is not None:
                self._notify(f"started execution {self.execution_arn}")
        while True:
            # Status first, history second: once the status is final the history is complete.
            described = client.describe_execution(executionArn=self.execution_arn)
            results = self._batch_results()
            if len(results) > self._returned:
                self._returned += 1
                return results[self._returned - 1]
            status = described["status"]
            if status != "RUNNING":
                raise SweepInvocationError(
                    {
                        "errorType": described.get("error") or f"Execution{status.title()}",
                        "errorMessage": described.get("cause")
                        or f"the execution ended {status} without a further batch result",
                        "executionArn": self.execution_arn,
                    }
                )
            self._sleep(self._poll_interval_s)

    def _batch_results(self) -> list[dict[str, Any]]:
        """Every sweep result in the history so far, oldest first."""
        assert self.execution_arn is not None
        results: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = (
                self._sfn().get_execution_history(
                    executionArn=self.execution_arn, maxResults=1000, nextToken=token
                )
                if token
                else self._sfn().get_execution_history(
                    executionArn=self.execution_arn, maxResults=1000
                )
            )
            for event in page["events"]:
                result = result_of_event(event)
                if result is not None:
                    results.append(result)
            token = page.get("nextToken")
            if not token:
                return results


def result_of_event(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sweep result a history event carries, if any.

    ``TaskSucceeded`` of the ``lambda:invoke`` integration holds the invoke response (the
    result is its ``Payload``); ``LambdaFunctionSucceeded`` (a plain function ARN as the
    Resource) holds the result itself.
    """
    details = event.get("taskSucceededEventDetails") or event.get(
        "lambdaFunctionSucceededEventDetails"
    )
    if not details or not isinstance(details.get("output"), str):
        return None
    try:
        output = json.loads(details["output"])
    except json.JSONDecodeError:
        return None
    if isinstance(output, dict) and isinstance(output.get("Payload"), dict):
        output = output["Payload"]
    if isinstance(output, dict) and all(key in output for key in RESULT_KEYS):
        return output
    return None


class LocalInvoker:
    """Calls the Sweep handler in this process, as Lambda would, one batch per call.

    Args:
        handler: ``(event, context) -> result``; by default the Sweep handler configured from
            the current environment.
        timeout_s: The context's budget (the deployed function's Timeout).
        clock: Drives the context's countdown.
    """

    def __init__(
        self,
        handler: Callable[[dict[str, Any], LambdaContext], dict[str, Any]] | None = None,
        *,
        timeout_s: float = LAMBDA_MAX_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler = handler
        self._timeout_s = timeout_s
        self._clock = clock

    def invoke(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Call the handler with a fresh context (a new request id, like a new invocation)."""
        from serenity_tools.standins.lambda_context import LocalLambdaContext

        handler = self._handler
        if handler is None:
            from serenity_allocator.handlers.sweep import lambda_handler

            handler = lambda_handler
        context = LocalLambdaContext(LOCAL_FUNCTION_NAME, self._timeout_s, self._clock)
        try:
            # The handler's logs and EMF lines go to stderr, so stdout carries only the summary
            # table, as it does when the function runs remotely.
            with contextlib.redirect_stdout(sys.stderr):
                result = handler(payload, context)
        except Exception as exc:
            # Lambda's error shape; the message is the exception's own (never holds a secret).
            raise SweepInvocationError(
                {"errorType": type(exc).__name__, "errorMessage": str(exc)}
            ) from exc
        return _checked_result(result)


def _checked_result(body: Any) -> dict[str, Any]:
    if isinstance(body, dict) and body.get("abandoned") is True and "run_id" in body:
        return body  # an abandon's answer
    if not isinstance(body, dict) or not all(key in body for key in RESULT_KEYS):
        shown = json.dumps(body, default=str)[:200]
        raise SweepInvocationError(
            {"errorType": "InvalidSweepResult", "errorMessage": f"not a sweep result: {shown}"}
        )
    return body
