"""A stand-in for one Lambda container behind the SQS event source mapping, as an OS process.

Each consumer is a separate process (``python -m serenity_tools.standins.consumer``) that does
what the event source mapping and the Lambda runtime do for one container:

- ReceiveMessage, up to 10, short polling (``WaitTimeSeconds=0``: the local broker serves one
  request at a time, a long poll would hold it), with every system and message attribute;
- builds the Lambda SQS event exactly as the mapping does (record keys, attribute names,
  ``messageAttributes`` in Lambda's lower-camel shape, ``eventSourceARN``, ``awsRegion``);
- calls the REAL ``serenity_allocator.handlers.allocator.lambda_handler`` with a Lambda context
  counting down from the function timeout;
- deletes the records NOT listed in ``batchItemFailures`` and leaves the failures to come back.
  A handler exception, an invalid response or an unknown item identifier fails the whole batch
  (nothing deleted), as the mapping does. The mapping leaves a failure invisible for the rest
  of the visibility timeout; with ``--retry-delay-s`` this stand-in makes it visible again
  after that many seconds instead (ChangeMessageVisibility), a local time compression: the
  visibility timeout can then be generous (a slow batch is never handed out twice) while a
  failed record still comes back quickly;
- a handler still running at the function timeout is killed with its process, as Lambda resets
  a timed-out execution environment (the pool starts a fresh one).

Every receive and release is written to a JSON-lines trace (:mod:`.traces`), so a harness can
check that no message group was ever held by two consumers at once, and tell a replay after a
crash or a timeout from a real duplicate. The parent side (starting, restarting, stopping these
processes) is :mod:`.consumer_pool`. The handler's stdout (logs and EMF) goes to a
per-process file for metric counting.

Crash injection (the harness's kill -9 scenario) is configured with environment variables:
``SERENITY_CRASH_AT`` (``before_handler`` | ``during_handler`` | ``after_handler_before_delete``
| ``random``), ``SERENITY_CRASH_PROBABILITY`` (per batch, default 1), ``SERENITY_CRASH_SEED``
and ``SERENITY_CRASH_MAX_DELAY_S`` (how far into the handler ``during_handler`` may strike).
The process then SIGKILLs itself at that point, after writing a ``crash`` trace line.

``--handler MODULE:FUNCTION`` replaces the handler (default: the Allocator's). The reliability
harness uses it to run the same container around a wrapper of the real handler (a worker that
trusts the body on a standard queue; a crash in the middle of outcome publishing).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.traces import TraceWriter

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

CRASH_POINTS = ("before_handler", "during_handler", "after_handler_before_delete")
CRASH_AT_ENV = "SERENITY_CRASH_AT"
CRASH_PROBABILITY_ENV = "SERENITY_CRASH_PROBABILITY"
CRASH_SEED_ENV = "SERENITY_CRASH_SEED"
CRASH_MAX_DELAY_ENV = "SERENITY_CRASH_MAX_DELAY_S"

DEFAULT_FUNCTION_NAME = "serenity-allocator-local-AllocatorFunction"
DEFAULT_HANDLER = "serenity_allocator.handlers.allocator:lambda_handler"
MAX_MESSAGES_PER_RECEIVE = 10
"""The event source mapping's batch size in template.yaml (and SQS's receive maximum)."""

HandlerFn = Callable[[dict[str, Any], Any], Any]


# -- crash injection ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CrashPlan:
    """Where and how often a consumer kills itself (SIGKILL) in the middle of its work.

    Attributes:
        at: One of :data:`CRASH_POINTS`, or ``random`` to pick one per crash.
        probability: Chance per batch that the consumer crashes.
        seed: Seed of the draws (combined with the consumer's index and generation, so a
            restarted consumer does not repeat its predecessor's draws).
        max_delay_s: ``during_handler`` strikes after a uniform delay in ``[0, max_delay_s]``.
    """

    at: str
    probability: float = 1.0
    seed: int | None = None
    max_delay_s: float = 0.2

    def __post_init__(self) -> None:
        if self.at not in (*CRASH_POINTS, "random"):
            raise ValueError(f"crash point must be one of {', '.join(CRASH_POINTS)} or random")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("crash probability must be within [0, 1]")
        if self.max_delay_s < 0:
            raise ValueError("crash max delay must not be negative")

    def environment(self) -> dict[str, str]:
        """The environment variables that carry this plan into a consumer process."""
        env = {
            CRASH_AT_ENV: self.at,
            CRASH_PROBABILITY_ENV: repr(self.probability),
            CRASH_MAX_DELAY_ENV: repr(self.max_delay_s),
        }
        if self.seed is not None:
            env[CRASH_SEED_ENV] = str(self.seed)
        return env

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> CrashPlan | None:
        """The plan described by ``env``; None when ``SERENITY_CRASH_AT`` is unset or blank."""
        at = (env.get(CRASH_AT_ENV) or "").strip()
        if not at:
            return None
        seed = env.get(CRASH_SEED_ENV)
        return cls(
            at=at,
            probability=float(env.get(CRASH_PROBABILITY_ENV) or 1.0),
            seed=int(seed) if seed else None,
            max_delay_s=float(env.get(CRASH_MAX_DELAY_ENV) or 0.2),
        )


class _CrashInjector:
    """Draws, per batch, whether and where this process dies."""

    def __init__(self, plan: CrashPlan | None, rng: random.Random, on_crash: Callable[[str], None]):
        self._plan = plan
        self._rng = rng
        self._on_crash = on_crash

    def draw(self) -> str | None:
        plan = self._plan
        if plan is None or self._rng.random() >= plan.probability:
            return None
        return self._rng.choice(CRASH_POINTS) if plan.at == "random" else plan.at

    def crash_if(self, chosen: str | None, point: str) -> None:
        if chosen == point:
            self._on_crash(point)

    def arm_during_handler(self, chosen: str | None) -> threading.Timer | None:
        if chosen != "during_handler" or self._plan is None:
            return None
        timer = threading.Timer(
            self._rng.uniform(0.0, self._plan.max_delay_s),
            self._on_crash,
            args=("during_handler",),
        )
        timer.daemon = True
        timer.start()
        return timer


def _die(trace: TraceWriter, index: int, reason: str) -> None:
    """Write the last trace line and SIGKILL this process (no cleanup, no flush of anything)."""
    trace.write({"ev": "crash", "consumer": index, "pid": os.getpid(), "at": reason})
    os.kill(os.getpid(), signal.SIGKILL)


# -- the event source mapping -------------------------------------------------------------------


def to_lambda_record(message: MessageTypeDef, *, queue_arn: str, region: str) -> dict[str, Any]:
    """One SQS message in the shape the event source mapping hands to Lambda."""
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message.get("Body", ""),
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            name: _lambda_message_attribute(value)
            for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    # Lambda renames the SQS API's keys to lower camel case and always lists both list keys.
    out: dict[str, Any] = {
        "stringListValues": list(value.get("StringListValues", [])),
        "binaryListValues": [
            base64.b64encode(item).decode("ascii") for item in value.get("BinaryListValues", [])
        ],
        "dataType": value.get("DataType", "String"),
    }
    if "StringValue" in value:
        out["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        out["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    return out


def build_sqs_event(
    messages: Sequence[MessageTypeDef], *, queue_arn: str, region: str
) -> dict[str, Any]:
    """The Lambda SQS event for one received batch, records in receive order."""
    return {
        "Records": [
            to_lambda_record(message, queue_arn=queue_arn, region=region) for message in messages
        ]
    }


def failed_message_ids(response: Any, batch_ids: Sequence[str]) -> set[str]:
    """The records the mapping will NOT delete, from the handler's partial batch response.

    As the event source mapping does, an invalid response, a failure entry without a valid
    identifier, or an identifier not in the batch fails the whole batch.
    """
    everything = set(batch_ids)
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        return everything
    failures = response.get("batchItemFailures", [])
    if not isinstance(failures, list):
        return everything
    failed: set[str] = set()
    for failure in failures:
        identifier = failure.get("itemIdentifier") if isinstance(failure, Mapping) else None
        if not isinstance(identifier, str) or identifier not in everything:
            return everything
        failed.add(identifier)
    return failed


def _describe(message: MessageTypeDef) -> dict[str, Any]:
    attributes = message.get("Attributes", {})
    request_id: str | None = None
    try:
        body = json.loads(message.get("Body", ""))
        if isinstance(body, dict) and isinstance(body.get("request_id"), str):
            request_id = body["request_id"]
    except ValueError:
        pass
    return {
        "id": message["MessageId"],
        "group": attributes.get("MessageGroupId", ""),
        "request_id": request_id,
        "receive_count": int(attributes.get("ApproximateReceiveCount", "0")),
    }


@dataclass
class EventSourceConsumer:
    """The receive -> invoke -> delete loop of one container.

    Attributes:
        index: The consumer slot (stable across restarts).
        queue_url: The allocation queue.
        queue_arn: Its ARN (the records' ``eventSourceARN``).
        region: The records' ``awsRegion``.
        sqs: An SQS client on the local endpoint.
        handler: The Lambda handler (the real one in a consumer process).
        trace: Where receive/release events go.
        function_timeout_s: The Lambda context's timeout; keep it below the queue's
            visibility timeout so a batch is finished (or killed) before SQS hands it out again.
        function_name: Reported by the Lambda context.
        idle_sleep_s: Pause after an empty receive.
        crash: Optional crash injection.
        rng: Source of the crash draws.
        kill_on_timeout: Emulate Lambda's reset of a timed-out environment (SIGKILL).
        retry_delay_s: Seconds until a failed record is visible again; None leaves it to the
            visibility timeout, as the event source mapping does.
    """

    index: int
    queue_url: str
    queue_arn: str
    region: str
    sqs: SQSClient
    handler: HandlerFn
    trace: TraceWriter
    function_timeout_s: float
    function_name: str = DEFAULT_FUNCTION_NAME
    idle_sleep_s: float = 0.1
    crash: CrashPlan | None = None
    rng: random.Random = field(default_factory=random.Random)
    kill_on_timeout: bool = True
    retry_delay_s: int | None = None
    clock: Callable[[], float] = time.monotonic
    batches: int = 0

    def __post_init__(self) -> None:
        self._injector = _CrashInjector(
            self.crash, self.rng, lambda point: _die(self.trace, self.index, point)
        )

    def run(
        self, stop: threading.Event, should_continue: Callable[[], bool] = lambda: True
    ) -> None:
        """Poll until ``stop`` is set (a batch in progress is always finished first)."""
        while not stop.is_set() and should_continue():
            try:
                handled = self.poll_once()
            except Exception as exc:  # the broker went away or refused: retry after a pause
                print(f"consumer {self.index}: receive failed: {exc!r}", file=sys.stderr)
                handled = 0
            if not handled:
                stop.wait(self.idle_sleep_s)

    def poll_once(self) -> int:
        """Receive one batch, invoke the handler, delete what succeeded; return the batch size."""
        requested_at = self.clock()
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=MAX_MESSAGES_PER_RECEIVE,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        received_at = self.clock()
        if not messages:
            return 0
        self.batches += 1
        base = {"consumer": self.index, "pid": os.getpid(), "batch": self.batches}
        groups = self._trace_receive(messages, base, requested_at, received_at)
        chosen = self._injector.draw()
        self._injector.crash_if(chosen, "before_handler")
        failures, error = self._invoke(messages, chosen)
        self._injector.crash_if(chosen, "after_handler_before_delete")
        released_at = self.clock()
        deleted, delete_failed = self._delete(
            [message for message in messages if message["MessageId"] not in failures]
        )
        self._schedule_retry([message for message in messages if message["MessageId"] in failures])
        self.trace.write(
            {
                "ev": "release",
                **base,
                "t": released_at,
                "t_done": self.clock(),
                "groups": list(groups),
                "failures": [m["MessageId"] for m in messages if m["MessageId"] in failures],
                "deleted": deleted,
                "delete_failed": delete_failed,
                "error": error,
            }
        )
        return len(messages)

    def _trace_receive(
        self,
        messages: Sequence[MessageTypeDef],
        base: Mapping[str, Any],
        requested_at: float,
        received_at: float,
    ) -> dict[str, list[str]]:
        described = [_describe(message) for message in messages]
        groups: dict[str, list[str]] = {}
        for item in described:
            groups.setdefault(item["group"], []).append(item["id"])
        self.trace.write(
            {
                "ev": "receive",
                **base,
                "t": received_at,
                "t_req": requested_at,
                "groups": groups,
                "msgs": described,
            }
        )
        return groups

    def _invoke(
        self, messages: Sequence[MessageTypeDef], chosen: str | None
    ) -> tuple[set[str], str | None]:
        """Call the handler under the function timeout; return (failed ids, error name)."""
        batch_ids = [message["MessageId"] for message in messages]
        crash_timer = self._injector.arm_during_handler(chosen)
        watchdog = self._arm_watchdog()
        try:
            event = build_sqs_event(messages, queue_arn=self.queue_arn, region=self.region)
            context = LocalLambdaContext(self.function_name, self.function_timeout_s, self.clock)
            return failed_message_ids(self.handler(event, context), batch_ids), None
        except Exception as exc:
            # A function error: the mapping deletes nothing and the batch comes back whole.
            traceback.print_exc()
            return set(batch_ids), type(exc).__name__
        finally:
            for timer in (crash_timer, watchdog):
                if timer is not None:
                    timer.cancel()

    def _arm_watchdog(self) -> threading.Timer | None:
        if not self.kill_on_timeout:
            return None
        timer = threading.Timer(
            self.function_timeout_s, lambda: _die(self.trace, self.index, "function_timeout")
        )
        timer.daemon = True
        timer.start()
        return timer

    def _schedule_retry(self, failed: Sequence[MessageTypeDef]) -> None:
        if self.retry_delay_s is None or not failed:
            return
        try:
            self.sqs.change_message_visibility_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {
                        "Id": str(index),
                        "ReceiptHandle": message["ReceiptHandle"],
                        "VisibilityTimeout": self.retry_delay_s,
                    }
                    for index, message in enumerate(failed)
                ],
            )
        except Exception as exc:  # they still come back, after the visibility timeout
            print(f"consumer {self.index}: retry delay not set: {exc!r}", file=sys.stderr)

    def _delete(self, messages: Sequence[MessageTypeDef]) -> tuple[list[str], list[str]]:
        if not messages:
            return [], []
        by_entry = {str(index): message for index, message in enumerate(messages)}
        try:
            response = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": entry_id, "ReceiptHandle": message["ReceiptHandle"]}
                    for entry_id, message in by_entry.items()
                ],
            )
        except Exception as exc:  # not deleted: they come back, and a replay is harmless
            print(f"consumer {self.index}: delete failed: {exc!r}", file=sys.stderr)
            return [], [message["MessageId"] for message in messages]
        deleted = [by_entry[item["Id"]]["MessageId"] for item in response.get("Successful", [])]
        failed = [by_entry[item["Id"]]["MessageId"] for item in response.get("Failed", [])]
        return deleted, failed


# -- the consumer process -----------------------------------------------------------------------


def _rng_for(plan: CrashPlan | None, index: int, generation: int) -> random.Random:
    seed = plan.seed if plan is not None and plan.seed is not None else time.time_ns()
    return random.Random(f"{seed}:{index}:{generation}")


def load_handler(reference: str) -> HandlerFn:
    """The function ``MODULE:FUNCTION`` names (imported now).

    Raises:
        ValueError: The reference is not of that form or does not name a callable.
    """
    import importlib

    module_name, _, function_name = reference.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"handler must be MODULE:FUNCTION, got {reference!r}")
    handler = getattr(importlib.import_module(module_name), function_name, None)
    if not callable(handler):
        raise ValueError(f"{reference} is not a callable")
    return handler  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one consumer process until SIGTERM/SIGINT or until its parent goes away."""
    parser = argparse.ArgumentParser(description="local SQS event source mapping consumer")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--generation", type=int, default=0)
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--queue-url", default=os.environ.get("QUEUE_URL", ""))
    parser.add_argument("--queue-arn", required=True)
    parser.add_argument("--region", default=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    parser.add_argument("--function-name", default=DEFAULT_FUNCTION_NAME)
    parser.add_argument("--function-timeout-s", type=float, required=True)
    parser.add_argument("--idle-sleep-s", type=float, default=0.1)
    parser.add_argument("--retry-delay-s", type=int, default=None)
    parser.add_argument("--parent-pid", type=int, default=os.getppid())
    parser.add_argument("--handler", default=DEFAULT_HANDLER, help="MODULE:FUNCTION")
    args = parser.parse_args(argv)

    # Each log and EMF line reaches the file as it is printed, so a kill -9 loses none.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    started = time.monotonic()
    import boto3

    handler = load_handler(args.handler)

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    crash = CrashPlan.from_environment(os.environ)
    trace = TraceWriter(args.trace)
    consumer = EventSourceConsumer(
        index=args.index,
        queue_url=args.queue_url,
        queue_arn=args.queue_arn,
        region=args.region,
        sqs=boto3.client("sqs"),
        handler=handler,
        trace=trace,
        function_timeout_s=args.function_timeout_s,
        function_name=args.function_name,
        idle_sleep_s=args.idle_sleep_s,
        retry_delay_s=args.retry_delay_s,
        crash=crash,
        rng=_rng_for(crash, args.index, args.generation),
    )
    base = {"consumer": args.index, "pid": os.getpid(), "generation": args.generation}
    trace.write({"ev": "start", **base, "startup_s": time.monotonic() - started})
    consumer.run(stop, should_continue=lambda: os.getppid() == args.parent_pid)
    trace.write({"ev": "stop", **base, "batches": consumer.batches})
    trace.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
