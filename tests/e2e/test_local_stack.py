"""The local stack end to end: moto in its own process, the simulator, consumer processes.

Real processes and real HTTP throughout. The only waits are short polls and, where a test is
about redelivery, one visibility timeout (2 s) of the local queue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import SqsModel

from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_allocator.handlers.settings import AllocatorSettings, SweepSettings
from serenity_tools.standins.consumer import (
    CrashPlan,
    EventSourceConsumer,
    build_sqs_event,
    failed_message_ids,
)
from serenity_tools.standins.moto_server import start_moto_server_process
from serenity_tools.standins.resources import local_client
from serenity_tools.standins.stack import (
    DEFAULT_VISIBILITY_TIMEOUT_S,
    LOCAL_RETRY_DELAY_S,
    LocalStack,
    drain,
)
from serenity_tools.standins.traces import TraceWriter, read_trace_events
from serenity_tools.verification.emf import count_metrics_in_files
from serenity_tools.verification.invariants import (
    UNTRACED_REPEAT,
    check_fifo_delivery,
    check_group_exclusivity,
    check_order,
    check_terminal_outcomes,
    workspaces_by_id,
)
from serenity_tools.verification.replays import explain_replays

REPO = Path(__file__).resolve().parents[2]


REDELIVERY_VISIBILITY_TIMEOUT_S = 20
"""For the tests ABOUT redelivery after a crash: they wait one visibility timeout. 20 s, not
less: with the suite on every core, a cold consumer's first batch (a 19 s function) measured
up to several seconds, and a 9 s function then failed the batch's first record `outOfTime`
before the crash the test is about."""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    """A fresh local stack per test, on the stack's generous default timings."""
    with LocalStack(work_dir=tmp_path / "stack") as started:
        yield started


@pytest.fixture
def redelivering_stack(tmp_path: Path) -> Iterator[LocalStack]:
    """A fresh local stack whose visibility timeout is short enough to wait out once."""
    with LocalStack(
        visibility_timeout_s=REDELIVERY_VISIBILITY_TIMEOUT_S, work_dir=tmp_path / "stack"
    ) as started:
        yield started


def _seed_pool(stack: LocalStack, *children: str) -> None:
    stack.simulator.seed(
        [
            {
                "id": "m",
                "ai": {"projects": {"used": 0, "total": 50}, "prompts": {"used": 0, "total": 9000}},
            },
            *[
                {
                    "id": child,
                    "parent_id": "m",
                    "ai": {
                        "projects": {"used": 1, "total": 1},
                        "prompts": {"used": 100, "total": 100},
                    },
                }
                for child in children
            ],
        ]
    )


def _received(stack: LocalStack) -> list[Any]:
    messages: list[Any] = stack.sqs.receive_message(
        QueueUrl=stack.resources.queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=0,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    return messages


def test_local_stack_env_configures_both_handlers(stack: LocalStack) -> None:
    # Given the running stack
    # When its environment is read by the handlers' settings
    env = stack.env()
    allocator = AllocatorSettings.from_env(env)
    sweep = SweepSettings.from_env(env)

    # Then both point at the stack, locally, with the kill switch on
    assert env["SEMRUSH_BASE_URL"] == stack.simulator.origin
    assert env["AWS_ENDPOINT_URL"] == stack.moto.endpoint_url
    assert allocator.environment == "local" and allocator.dynamic_allocation
    assert allocator.queue_url == stack.resources.queue_url
    assert allocator.dlq_url == stack.resources.dlq_url
    assert allocator.max_receive_count == 5
    assert sweep.sweep_bucket == stack.resources.bucket
    # And a batch finishes before SQS would hand it out again, with generous room by default,
    # while a failed record comes back after the short local retry delay
    assert stack.visibility_timeout_s == DEFAULT_VISIBILITY_TIMEOUT_S
    assert stack.function_timeout_s == DEFAULT_VISIBILITY_TIMEOUT_S - 1
    assert stack.retry_delay_s == LOCAL_RETRY_DELAY_S
    assert stack.semrush_timeout_s + allocator.safety_margin_ms / 1000 < stack.function_timeout_s
    # And the printable environment carries no token
    assert "SEMRUSH_TOKEN" not in stack.printable_env()
    assert (
        stack.env(SERENITY_DYNAMIC_ALLOCATION="false", SAFETY_MARGIN_MS=None)[
            "SERENITY_DYNAMIC_ALLOCATION"
        ]
        == "false"
    )
    assert "SAFETY_MARGIN_MS" not in stack.env(SAFETY_MARGIN_MS=None)


def test_build_sqs_event_has_the_event_source_mapping_shape(stack: LocalStack) -> None:
    # Given a FIFO message with a message attribute, received from moto
    stack.sqs.send_message(
        QueueUrl=stack.resources.queue_url,
        MessageBody='{"k": 1}',
        MessageGroupId="child-1",
        MessageDeduplicationId="dedup-1",
        MessageAttributes={"origin": {"StringValue": "svc", "DataType": "String"}},
    )
    messages = _received(stack)

    # When it is turned into a Lambda event
    event = build_sqs_event(messages, queue_arn=stack.resources.queue_arn, region="us-east-1")

    # Then it parses with Powertools' SQS model and has the keys of a real FIFO event
    SqsModel.model_validate(event)
    record = event["Records"][0]
    real = json.loads((REPO / "events" / "ensure-one.json").read_text())["Records"][0]
    assert set(real) <= set(record)
    assert set(real["attributes"]) == set(record["attributes"])
    assert record["attributes"]["MessageGroupId"] == "child-1"
    assert record["attributes"]["MessageDeduplicationId"] == "dedup-1"
    assert record["messageAttributes"] == {
        "origin": {
            "stringValue": "svc",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        }
    }
    assert record["eventSourceARN"] == stack.resources.queue_arn


def _consumer(
    stack: LocalStack, tmp_path: Path, handler: Any, retry_delay_s: int | None = None
) -> EventSourceConsumer:
    return EventSourceConsumer(
        index=0,
        queue_url=stack.resources.queue_url,
        queue_arn=stack.resources.queue_arn,
        region=stack.region,
        sqs=stack.sqs,
        handler=handler,
        trace=TraceWriter(tmp_path / "trace.jsonl"),
        function_timeout_s=stack.function_timeout_s,
        kill_on_timeout=False,  # in-process: never SIGKILL the test runner
        retry_delay_s=retry_delay_s,
    )


def _send(stack: LocalStack, group: str, count: int) -> None:
    for index in range(count):
        stack.sqs.send_message(
            QueueUrl=stack.resources.queue_url,
            MessageBody=json.dumps({"n": index}),
            MessageGroupId=group,
            MessageDeduplicationId=f"{group}-{index}",
        )


def test_consumer_deletes_successes_and_leaves_batch_item_failures(
    stack: LocalStack, tmp_path: Path
) -> None:
    # Given two messages in each of two groups, and a handler failing the second of group b
    _send(stack, "a", 2)
    _send(stack, "b", 2)

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        failed = [
            r["messageId"]
            for r in event["Records"]
            if r["body"] == '{"n": 1}' and r["attributes"]["MessageGroupId"] == "b"
        ]
        return {"batchItemFailures": [{"itemIdentifier": m} for m in failed]}

    # When one consumer handles the batch
    consumer = _consumer(stack, tmp_path, handler)
    handled = consumer.poll_once()

    # Then three messages are deleted and the failure stays in flight for redelivery
    assert handled == 4
    depth = stack.queue_depth()
    assert (depth.visible, depth.in_flight) == (0, 1)
    release = [e for e in read_trace_events([tmp_path / "trace.jsonl"]) if e["ev"] == "release"]
    assert len(release[0]["deleted"]) == 3 and len(release[0]["failures"]) == 1


def test_consumer_with_a_retry_delay_makes_a_failed_record_visible_again_after_it(
    stack: LocalStack, tmp_path: Path
) -> None:
    # Given two messages of one group and a handler that fails both
    _send(stack, "a", 2)

    def failing(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}

    # When a consumer with a zero retry delay handles the batch
    consumer = _consumer(stack, tmp_path, failing, retry_delay_s=0)
    consumer.poll_once()

    # Then both are visible again at once, not after the (generous) visibility timeout
    depth = stack.queue_depth()
    assert (depth.visible, depth.in_flight) == (2, 0)


def test_consumer_deletes_nothing_when_the_handler_raises_or_answers_garbage(
    stack: LocalStack, tmp_path: Path
) -> None:
    # Given a batch of three
    _send(stack, "a", 3)

    def raising(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise RuntimeError("boom")

    # When the handler raises
    consumer = _consumer(stack, tmp_path, raising)
    consumer.poll_once()

    # Then nothing is deleted: the whole batch comes back after the visibility timeout
    assert stack.queue_depth().in_flight == 3
    release = [e for e in read_trace_events([tmp_path / "trace.jsonl"]) if e["ev"] == "release"]
    assert release[0]["error"] == "RuntimeError" and release[0]["deleted"] == []
    # And, as the mapping does, an unknown identifier or a malformed response fails it all
    batch = ["m1", "m2"]
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "x"}]}, batch) == {
        "m1",
        "m2",
    }
    assert failed_message_ids("not a response", batch) == {"m1", "m2"}
    assert failed_message_ids({"batchItemFailures": [{"itemIdentifier": "m2"}]}, batch) == {"m2"}
    assert failed_message_ids(None, batch) == set()


def test_consumer_processes_drain_ensures_end_to_end(stack: LocalStack) -> None:
    # Given two tight children and six ensures (a coalescable run for each)
    _seed_pool(stack, "c1", "c2")
    before = workspaces_by_id(stack.simulator.dump()["workspaces"])
    producer = AllocationProducer(stack.resources.queue_url, stack.sqs)
    requests = []
    for child in ("c1", "c2", "c1", "c2", "c1", "c2"):
        requests.append(producer.enqueue_ensure(child, "m", {"projects": 0, "prompts": 50}))

    # When two consumer processes drain the queue through the real handler
    summary = drain(stack, consumers=2, timeout_s=300)

    # Then every request completed, each child topped up once to cover the sum of its needs
    assert summary.drained
    assert summary.traces.deleted == 6 and summary.traces.crashes == 0
    outcomes = stack.outcomes.outcomes()
    assert sorted(o.request_id for o in outcomes) == sorted(requests)
    assert {o.status for o in outcomes} == {"topped-up"}
    after = workspaces_by_id(stack.simulator.dump()["workspaces"])
    assert after["c1"]["ai"]["prompts"]["total"] >= 100 + 150
    transfers = [c for c in stack.simulator.calls() if c["op"] == "transfer"]
    assert 2 <= len(transfers) <= 6
    # And the traces show one holder per group, in FIFO order; the EMF output was captured
    events = read_trace_events(summary.trace_paths)
    built = [r for r in _requests_from(events)]
    assert check_group_exclusivity(events, stack.visibility_timeout_s).passed
    assert check_fifo_delivery(events, built, 5).passed
    assert check_order(built, outcomes, stack.simulator.calls(), before).passed
    metrics = count_metrics_in_files(summary.stdout_paths)
    assert sum(t.samples for k, t in metrics.items() if k.name == "HeadroomCheck") >= 2


def _requests_from(events: list[dict[str, Any]]) -> list[Any]:
    """Rebuild the requests, in delivery order, from what the consumers received (ids only)."""
    from serenity_allocator.adapters.sqs import build_ensure

    seen: dict[str, Any] = {}
    for event in events:
        for message in event.get("msgs", []):
            rid = message["request_id"]
            if rid and rid not in seen:
                seen[rid] = build_ensure(message["group"], "m", request_id=rid)
    return list(seen.values())


def test_crashed_consumer_batch_comes_back_and_every_request_completes(
    redelivering_stack: LocalStack,
) -> None:
    stack = redelivering_stack
    # Given three ensures for one child
    _seed_pool(stack, "c1")
    before = workspaces_by_id(stack.simulator.dump()["workspaces"])
    producer = AllocationProducer(stack.resources.queue_url, stack.sqs)
    requests = [
        producer.enqueue_ensure("c1", "m", {"projects": 0, "prompts": 50}) for _ in range(3)
    ]
    built = _requests_from([{"msgs": [{"group": "c1", "request_id": r} for r in requests]}])

    # When a consumer dies (kill -9) after the handler ran but before it deleted the batch
    crashing = stack.start_consumers(1, crash=CrashPlan("after_handler_before_delete"))
    crashing.processes[0].process.wait(timeout=120)
    # And fresh consumers then drain the queue (the batch returns after the visibility timeout)
    summary = drain(stack, consumers=1, timeout_s=300)

    # Then the crash is in the trace, the batch was redelivered and completed
    assert crashing.processes[0].process.returncode == -signal.SIGKILL
    events = read_trace_events([*crashing.trace_paths, *summary.trace_paths])
    assert [e["at"] for e in events if e["ev"] == "crash"] == ["after_handler_before_delete"]
    assert summary.drained and summary.traces.deleted == 3
    # And the replay was harmless: one transfer, replayed outcomes, order and FIFO intact
    outcomes = stack.outcomes.outcomes()
    causes = explain_replays(events)
    terminal = check_terminal_outcomes(built, outcomes, set(), replay_causes=causes.by_request)
    assert terminal.passed
    assert sorted(terminal.explained) == sorted(
        f"{rid}: 2 identical outcomes (consumer 0 died: after_handler_before_delete)"
        for rid in requests
    )
    assert causes.interrupted_groups == {"c1"}
    # And without the traces they are still the promised at-least-once (identical), with the
    # untraced cause, while a second outcome of DIFFERENT content is a violation
    untraced = check_terminal_outcomes(built, outcomes, set())
    assert untraced.passed and all(UNTRACED_REPEAT in line for line in untraced.explained)
    different = outcomes[0].model_copy(update={"receive_count": 9})
    assert not check_terminal_outcomes(built, [*outcomes, different], set()).passed
    assert check_order(built, outcomes, stack.simulator.calls(), before).passed
    assert check_group_exclusivity(events, stack.visibility_timeout_s).passed
    assert check_fifo_delivery(events, built, 5).passed
    assert len([c for c in stack.simulator.calls() if c["op"] == "transfer"]) == 1


def _redelivery_order(endpoint_url: str) -> list[str]:
    sqs = local_client("sqs", endpoint_url)
    queue = sqs.create_queue(QueueName="order.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    for index in range(3):
        sqs.send_message(
            QueueUrl=queue,
            MessageBody=f"m{index}",
            MessageGroupId="g",
            MessageDeduplicationId=f"d{index}",
        )
    # Received with a zero visibility timeout: in flight, yet visible again at once (the same
    # state as three failed messages whose visibility timeout has passed, without waiting).
    first = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=0)
    assert [m["Body"] for m in first["Messages"]] == ["m0", "m1", "m2"]
    again = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    return [m["Body"] for m in again.get("Messages", [])]


def test_stock_moto_breaks_fifo_redelivery_and_the_stack_broker_does_not() -> None:
    # Given three in-flight messages of one group that become visible together
    # When they are received again
    with start_moto_server_process(fifo_fix=False) as stock:
        stock_order = _redelivery_order(stock.endpoint_url)
    with start_moto_server_process() as fixed:
        fixed_order = _redelivery_order(fixed.endpoint_url)

    # Then stock moto 5.x hands out the LAST one alone (a FIFO violation); ours keeps order
    assert stock_order == ["m2"]
    assert fixed_order == ["m0", "m1", "m2"]


def test_local_up_prints_the_environment_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    # Given `serenity-allocator local up` with one consumer
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serenity_tools.cli",
            "local",
            "up",
            "--consumers",
            "1",
            "--enforcement-lag-ms",
            "0",
            "--work-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
    )
    assert process.stdout is not None
    lines = []
    try:
        # When it reports ready
        for line in process.stdout:
            lines.append(line)
            if line.startswith("# Ctrl-C"):
                break
        # Then Ctrl-C stops it cleanly
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines)
    assert "export QUEUE_URL=" in output and "SEMRUSH_TOKEN_SECRET_ID" not in output
    assert "export IMS_HOST=" in output and "export CREDENTIALS_KEY_ARN=" in output
    assert "export CREDENTIALS_TABLE=" in output and "export DLQ_URL=" in output
    assert "export SEMRUSH_TOKEN=" not in output
    # And, with no --credentials, its consumers run in the deployed mode: IMS
    assert "#   credential mode          ims\n" in output
    assert "export IMS_CONSUMER_SECRET_ID=" in output
    # And a service's guide: the ledger table, the bearer's secret, the gate's lag, the routes
    assert "export REQUEST_LEDGER_TABLE=" in output and "export SIMULATOR_ORIGIN=" in output
    assert "secretsmanager get-secret-value --secret-id" in output
    assert "# write gate: enforcement lag 0 ms" in output
    assert "#   DELETE /project-engine/v1/workspaces/{id}/projects" in output
    assert any(p.name.endswith(".trace.jsonl") for p in tmp_path.rglob("*"))


def _unpatched(receive: Any) -> Any:
    # The session's moto fixture already patched this process; test the patch from scratch.
    return getattr(receive, "__wrapped__", receive)


def test_patch_moto_fifo_redelivery_fixes_an_in_process_moto(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an in-thread moto of this process (the patch is undone after the test)
    from moto.sqs.models import SQSBackend

    from serenity_tools.standins.moto_fifo import patch_moto_fifo_redelivery
    from serenity_tools.standins.moto_server import start_moto_server

    monkeypatch.setattr(SQSBackend, "receive_message", SQSBackend.receive_message)
    monkeypatch.setattr(SQSBackend, "receive_message", _unpatched(SQSBackend.receive_message))
    with start_moto_server(fifo_fix=False) as server:
        # When the patch is installed (twice: the second call is a no-op)
        assert patch_moto_fifo_redelivery() is True
        assert patch_moto_fifo_redelivery() is False

        # Then redelivery keeps FIFO order
        assert _redelivery_order(server.endpoint_url) == ["m0", "m1", "m2"]


def _expiring_one_by_one(monkeypatch: pytest.MonkeyPatch, *, frozen: bool) -> list[list[str]]:
    """Three in-flight messages of one group become visible a few clock readings apart while
    moto's clock advances one millisecond per reading; receive twice (the second time with
    all three long visible) and return what each receive delivered."""
    from moto.core.utils import unix_time_millis
    from moto.sqs import models
    from moto.sqs.models import SQSBackend

    from serenity_tools.standins import moto_fifo

    monkeypatch.setattr(models, "unix_time_millis", unix_time_millis)
    monkeypatch.setattr(SQSBackend, "receive_message", _unpatched(SQSBackend.receive_message))
    if not frozen:  # the fix as it was: free the expired ones, but let the clock run
        monkeypatch.setattr(moto_fifo, "_CLOCK", "unix_time")
    moto_fifo.patch_moto_fifo_redelivery()
    backend = SQSBackend("us-east-1", "123456789012")
    backend.create_queue("order.fifo", FifoQueue="true", VisibilityTimeout="30")
    for index in range(3):
        backend.send_message("order.fifo", f"m{index}", group_id="g", deduplication_id=f"d{index}")
    assert len(backend.receive_message("order.fifo", 10, 0, 30)) == 3
    received = list(backend.get_queue("order.fifo")._messages)  # the broker's own, not copies
    start = int(unix_time_millis()) + 60_000
    ticks = iter(range(start, start + 1_000))
    monkeypatch.setattr(models, "unix_time_millis", lambda *_: next(ticks))
    for message, visible_at in zip(received, (0, start + 4, start + 5), strict=True):
        message.visible_at = visible_at
    first = backend.receive_message("order.fifo", 10, 0, 30)
    for message in received:
        message.visible_at = 0
    second = backend.receive_message("order.fifo", 10, 0, 30)
    return [[m.body for m in first], [m.body for m in second]]


def test_fifo_fix_holds_the_clock_while_a_groups_messages_expire_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a group whose failed messages become visible again DURING one receive
    # When it is received with the clock held still for the receive, and with it running
    fixed = _expiring_one_by_one(monkeypatch, frozen=True)
    running = _expiring_one_by_one(monkeypatch, frozen=False)

    # Then the fixed broker waits for the group, then delivers it whole and in order; with
    # the clock running, moto frees the late ones one by one and hands out the last alone
    assert fixed == [[], ["m0", "m1", "m2"]]
    assert running[0] == ["m2"]
