"""The Allocator worker wired for real: moto over HTTP, the Semrush simulator, the real handler.

A test enqueues with the real producer (or sends raw bodies for invalid messages), then calls
:meth:`AllocatorHarness.invoke`, which does what Lambda's SQS event source mapping does: receive
up to 10 messages, build the event, call ``lambda_handler(event, context, runtime=...)`` and
delete the records the handler did not report as failed. The runtime is the production one,
``build_runtime(AllocatorSettings.from_env(env))``, with only its ``sleep`` replaced by a
recorder, so no test waits for real.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serenity_allocator.handlers import allocator
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime, build_runtime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_allocator.producer import AllocationProducer
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.resources import LOCAL_REGION, LocalResources, local_client
from tests.integration.sqs_events import (
    build_sqs_event,
    delete_completed,
    failed_ids,
    make_visible,
    receive_messages,
)

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

    from serenity_tools.standins.simulator import SimulatorServer

TOKEN = "tok-integration"
ENVIRONMENT = "integration"
FUNCTION_NAME = "AllocatorFunction"
FUNCTION_TIMEOUT_S = 60.0
"""The template's AllocatorFunction Timeout."""


def no_jitter() -> float:
    """The middle of the jitter's range: IMS retries pause exactly 1 s then 2 s."""
    return 0.5


class RecordingSleep:
    """A sleeper that records what it was asked to sleep and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@dataclass
class Invocation:
    """One handler call: the event it got and the partial batch response it returned."""

    event: dict[str, Any]
    response: dict[str, Any]
    exceptions: list[str] = field(default_factory=list)
    """Every exception the batch processor caught from a record, formatted with traceback."""

    @property
    def message_ids(self) -> list[str]:
        """The event's message ids, in batch order."""
        return [record["messageId"] for record in self.event["Records"]]

    @property
    def failed(self) -> list[str]:
        """The reported batch item failures, in response order."""
        return failed_ids(self.response)

    def receive_counts(self) -> list[int]:
        """ApproximateReceiveCount of each record, in batch order."""
        return [int(r["attributes"]["ApproximateReceiveCount"]) for r in self.event["Records"]]


def worker_env(resources: LocalResources, sim: SimulatorServer) -> dict[str, str]:
    """The contract environment of the worker, pointed at moto and the simulator."""
    return {
        "SEMRUSH_BASE_URL": sim.origin,
        "SEMRUSH_TOKEN": TOKEN,
        "QUEUE_URL": resources.queue_url,
        "DLQ_URL": resources.dlq_url,
        "OUTCOME_BUS_NAME": resources.bus_name,
        "MAX_RECEIVE_COUNT": str(resources.max_receive_count),
        "ENVIRONMENT": ENVIRONMENT,
        "SERENITY_DYNAMIC_ALLOCATION": "true",
    }


@dataclass
class AllocatorHarness:
    """The worker, its queues and its upstream, driven one event-source-mapping poll at a time."""

    resources: LocalResources
    sim: SimulatorServer
    env: dict[str, str]
    runtime: AllocatorRuntime
    sleeps: RecordingSleep
    sqs: SQSClient
    producer: AllocationProducer
    invocations: list[Invocation] = field(default_factory=list)

    def invoke(self) -> Invocation:
        """Receive a batch (it must not be empty), run the handler, delete what completed."""
        messages = receive_messages(self.sqs, self.resources.queue_url)
        assert messages, "the event source mapping never invokes with an empty batch"
        return self.handle(messages)

    def handle(self, messages: list[MessageTypeDef]) -> Invocation:
        """Run the handler on already received ``messages``, then delete what completed."""
        event, response = self.run_handler(messages)
        exceptions = [
            "".join(traceback.format_exception(info[1]))
            for info in allocator.processor.exceptions
            if info[1] is not None
        ]
        delete_completed(self.sqs, self.resources.queue_url, event, response)
        invocation = Invocation(event, response, exceptions)
        self.invocations.append(invocation)
        return invocation

    def run_handler(
        self,
        messages: list[MessageTypeDef],
        *,
        timeout_s: float = FUNCTION_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Lambda event for ``messages`` and the handler's response; deletes nothing.

        ``timeout_s`` and ``clock`` are the invocation's time to live and the clock it runs
        out on (a test's function clock makes which calls fit exact).
        """
        event = build_sqs_event(messages, queue_arn=self.resources.queue_arn, region=LOCAL_REGION)
        context = LocalLambdaContext(FUNCTION_NAME, timeout_s, clock)
        response: dict[str, Any] = lambda_handler(event, context, runtime=self.runtime)
        return event, response

    def die_before_the_delete(self) -> Invocation:
        """Receive a batch and run the handler, then die before deleting anything.

        The crash harness's ``after_handler_before_delete``: every record, completed or not,
        comes back with the same message id (its visibility timeout ended now).
        """
        messages = receive_messages(self.sqs, self.resources.queue_url)
        assert messages, "the event source mapping never invokes with an empty batch"
        event, response = self.run_handler(messages)
        invocation = Invocation(event, response)
        self.invocations.append(invocation)
        every_record = {
            "batchItemFailures": [{"itemIdentifier": m} for m in invocation.message_ids]
        }
        make_visible(self.sqs, self.resources.queue_url, event, every_record)
        return invocation

    def redeliver_failed(self, invocation: Invocation) -> None:
        """Let the failed records of ``invocation`` come back now (visibility timeout over)."""
        make_visible(self.sqs, self.resources.queue_url, invocation.event, invocation.response)

    def redeliver_each(self, receives: int) -> list[Invocation]:
        """Run ``receives`` receives in a row, the failed records of each let back at once.

        How a test walks a message through its earlier receives (a stuck child, a failing
        upstream) without waiting out a visibility timeout; the caller checks each invocation.
        """
        invocations = []
        for _ in range(receives):
            invocation = self.invoke()
            self.redeliver_failed(invocation)
            invocations.append(invocation)
        return invocations

    def redrive_from_the_dlq(self, *, group_id: str, dedup_id: str) -> str:
        """Let SQS move the message to the DLQ, then send it again as an operator's redrive does.

        The next receive finds nothing (SQS moved the message past its last receive), the DLQ
        holds that one message, and its body is sent again: a new message id, returned.
        """
        assert self.receive() == [], "SQS moves the message to the DLQ on the next receive"
        [dead] = self.drain_dlq()
        return self.send_raw(dead["Body"], group_id=group_id, dedup_id=dedup_id)

    def receive(self) -> list[MessageTypeDef]:
        """One receive on the main queue, without handling (e.g. to watch a redrive happen)."""
        return receive_messages(self.sqs, self.resources.queue_url)

    def send_raw(self, body: str, *, group_id: str, dedup_id: str) -> str:
        """Send a body the producer would refuse to build; return the SQS message id."""
        answer = self.sqs.send_message(
            QueueUrl=self.resources.queue_url,
            MessageBody=body,
            MessageGroupId=group_id,
            MessageDeduplicationId=dedup_id,
        )
        return answer["MessageId"]

    def drain_dlq(self) -> list[MessageTypeDef]:
        """Every message on the DLQ (bodies and attributes), deleted as read, in receive order."""
        drained: list[MessageTypeDef] = []
        while batch := receive_messages(self.sqs, self.resources.dlq_url):
            drained.extend(batch)
            for message in batch:
                self.sqs.delete_message(
                    QueueUrl=self.resources.dlq_url, ReceiptHandle=message["ReceiptHandle"]
                )
        return drained


@contextmanager
def allocator_harness(
    resources: LocalResources,
    sim: SimulatorServer,
    overrides: Mapping[str, str | None] | None = None,
) -> Iterator[AllocatorHarness]:
    """A harness on ``resources`` and ``sim``; ``overrides`` set variables (None unsets one)."""
    env = worker_env(resources, sim)
    for name, value in (overrides or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    runtime = build_runtime(AllocatorSettings.from_env(env))
    sleeps = RecordingSleep()
    runtime.sleep = sleeps
    runtime.jitter = no_jitter
    harness = AllocatorHarness(
        resources=resources,
        sim=sim,
        env=env,
        runtime=runtime,
        sleeps=sleeps,
        sqs=local_client("sqs", resources.endpoint_url),
        producer=AllocationProducer(resources.queue_url),
    )
    try:
        yield harness
    finally:
        close = getattr(runtime.gateway, "close", None)
        if close is not None:
            close()


# ---------------------------------------------------------------- simulator state


def workspace(
    workspace_id: str,
    *,
    parent_id: str | None = None,
    projects: tuple[int, int] = (0, 0),
    prompts: tuple[int, int] = (0, 0),
    prompts_drafted: int = 0,
) -> dict[str, Any]:
    """A simulator seed entry; ``projects``/``prompts`` are ``(used, total)``."""
    return {
        "id": workspace_id,
        "title": workspace_id,
        "parent_id": parent_id,
        "ai": {
            "projects": {"used": projects[0], "drafted": 0, "total": projects[1]},
            "prompts": {"used": prompts[0], "drafted": prompts_drafted, "total": prompts[1]},
        },
    }


def totals_of(sim: SimulatorServer) -> dict[str, tuple[int, int]]:
    """``{workspace id: (projects total, prompts total)}`` from the simulator's dump."""
    return {
        w["id"]: (w["ai"]["projects"]["total"], w["ai"]["prompts"]["total"])
        for w in sim.dump()["workspaces"]
    }


def api_calls(sim: SimulatorServer, op: str | None = None) -> list[dict[str, Any]]:
    """The simulator's call log (API operations only), optionally of one operation."""
    return [call for call in sim.calls() if op is None or call["op"] == op]


def transfer_bodies(sim: SimulatorServer) -> list[tuple[str, int, dict[str, int]]]:
    """``(workspace id, status, ai totals sent)`` of every transfer call, in call order."""
    return [
        (call["workspace_id"], call["status"], call["body"]["resources"]["ai"])
        for call in api_calls(sim, "transfer")
    ]


# ---------------------------------------------------------------- EMF


def emf_blobs(stdout: str) -> list[dict[str, Any]]:
    """Every printed JSON line that carries an ``_aws`` EMF envelope, in print order."""
    blobs = []
    for raw_line in stdout.splitlines():
        line = raw_line.strip()
        if not line.startswith("{"):
            continue
        try:
            document = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(document, dict) and "_aws" in document:
            blobs.append(document)
    return blobs


def metric_values(blobs: list[dict[str, Any]], name: str) -> list[tuple[float, dict[str, str]]]:
    """``(value, {dimension: value})`` of every recorded value of metric ``name``."""
    found: list[tuple[float, dict[str, str]]] = []
    for blob in blobs:
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            if not any(metric["Name"] == name for metric in directive["Metrics"]):
                continue
            dims = {dim: str(blob[dim]) for group in directive["Dimensions"] for dim in group}
            raw = blob[name]
            for value in raw if isinstance(raw, list) else [raw]:
                found.append((float(value), dims))
    return found
