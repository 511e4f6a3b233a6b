"""The Allocator worker end to end over real HTTP: moto (SQS FIFO, EventBridge, Secrets Manager)
and the Semrush simulator.

Messages are sent with the real producer, received the way Lambda's event source mapping
receives them, handled by the real ``lambda_handler`` with the production runtime (only its
sleep is a recorder), and the completed records are deleted as the mapping deletes them. The
pure in-memory handler cases live in tests/unit/handlers/test_allocator*.py; these show the same
behaviour holds against the real wire formats.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from serenity_allocator.adapters.eventbridge_outcomes import EVENT_SOURCE, OUTCOME_DETAIL_TYPE
from serenity_allocator.adapters.sqs import REASON_ATTRIBUTE
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import (
    AllocatorHarness,
    Invocation,
    allocator_harness,
    api_calls,
    emf_blobs,
    metric_values,
    totals_of,
    transfer_bodies,
    workspace,
)

MASTER = "ws-master"
CHILD = "ws-child-a"
OTHER_CHILD = "ws-child-b"
THIRD_CHILD = "ws-child-c"
POOL = (100, 10_000)
"""The master's (projects, prompts) totals: the org pool, nothing used at the master."""


@pytest.fixture
def worker(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> Iterator[AllocatorHarness]:
    """The worker with the kill switch on and a plain loopback token."""
    with allocator_harness(local_resources, sim) as harness:
        yield harness


def _seed(sim: SimulatorServer, *children: dict[str, Any], pool: tuple[int, int] = POOL) -> None:
    sim.seed([workspace(MASTER, projects=(0, pool[0]), prompts=(0, pool[1])), *children])


def _child(
    workspace_id: str = CHILD, *, projects: tuple[int, int] = (1, 1), prompts: tuple[int, int]
) -> dict[str, Any]:
    return workspace(workspace_id, parent_id=MASTER, projects=projects, prompts=prompts)


def _family_sum(sim: SimulatorServer) -> tuple[int, int]:
    totals = totals_of(sim).values()
    return sum(t[0] for t in totals), sum(t[1] for t in totals)


def _queue_is_empty(worker: AllocatorHarness) -> bool:
    return worker.receive() == []


# ---------------------------------------------------------------- ensure


def test_worker_ensure_on_hot_path_costs_exactly_one_semrush_call(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a child with room for 200 more prompts and as much again after them (used 100 of
    # 500: nothing to refill ahead) and two projects to spare
    _seed(sim, _child(projects=(1, 3), prompts=(100, 500)))
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 200})

    # When the worker handles the batch
    invocation = worker.invoke()

    # Then exactly one Semrush call was made (the child read), nothing moved, the message is done
    assert [(c["op"], c["workspace_id"]) for c in api_calls(sim)] == [("read_resources", CHILD)]
    assert invocation.failed == []
    assert totals_of(sim)[CHILD] == (3, 500)
    [outcome] = outcome_capture.outcomes()
    assert outcome["request_id"] == request_id
    assert outcome["status"] == "hot-path"
    assert outcome["totals_before"] == outcome["totals_after"] == {"projects": 3, "prompts": 500}
    assert _queue_is_empty(worker)


def test_worker_ensure_tops_up_four_blocks_past_its_need_taking_units_from_the_pool(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a child using 150 of 200 prompts that needs 230 more (380, plus four blocks: 780)
    # and uses its one project (refilled ahead: 1 + 4 = 5)
    _seed(sim, _child(prompts=(150, 200)))
    pool_before = totals_of(sim)[MASTER]
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})

    # When the worker handles it
    invocation = worker.invoke()

    # Then one transfer raised the child to its need plus four blocks and the pool lost exactly
    # the difference
    assert invocation.failed == []
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 5, "prompts": 780})]
    assert totals_of(sim)[CHILD] == (5, 780)
    assert totals_of(sim)[MASTER] == (pool_before[0] - 4, pool_before[1] - 580)
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "topped-up"
    assert outcome["totals_before"] == {"projects": 1, "prompts": 200}
    assert outcome["totals_after"] == {"projects": 5, "prompts": 780}


def test_worker_ensure_above_the_brand_ceiling_is_rejected_without_transfer(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a top-up to 400 prompts but a brand ceiling of 300
    _seed(sim, _child(prompts=(150, 200)))
    worker.producer.enqueue_ensure(
        CHILD, MASTER, {"projects": 0, "prompts": 230}, ceiling={"projects": 10, "prompts": 300}
    )

    # When the worker handles it
    invocation = worker.invoke()

    # Then it is rejected as brandAiLimit, completed, and nothing was transferred
    assert invocation.failed == []
    assert api_calls(sim, "transfer") == []
    assert totals_of(sim)[CHILD] == (1, 200)
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "brandAiLimit")
    assert _queue_is_empty(worker)


def test_worker_ensure_on_an_exhausted_pool_is_rejected_and_conserves_units(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a pool with 100 free prompts and a child that lacks 180 (needs 380, holds 200)
    _seed(sim, _child(prompts=(150, 200)), pool=(100, 100))
    units_before = _family_sum(sim)
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})

    # When the worker handles it
    invocation = worker.invoke()

    # Then the pool read showing that even the exact 180 cannot fit, no transfer is sent (it
    # would be refused for nothing, ADR 0027): the request is rejected and completed, and the
    # family holds exactly the units it held before
    assert invocation.failed == []
    assert transfer_bodies(sim) == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "orgPoolExhausted")
    assert _family_sum(sim) == units_before
    assert totals_of(sim)[CHILD] == (1, 200)


def test_worker_ensure_retries_a_not_ready_child_inside_the_invocation(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a child whose next transfer meets "workspace not ready" once
    _seed(sim, _child(prompts=(150, 200)))
    sim.faults(not_ready_next={CHILD: 1})
    worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})

    # When the worker handles it
    invocation = worker.invoke()

    # Then the second transfer succeeded within the same invocation after one short sleep
    assert invocation.failed == []
    assert [status for _, status, _ in transfer_bodies(sim)] == [422, 200]
    assert worker.sleeps.calls == [worker.runtime.settings.ensure_retry_interval_s]
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "topped-up"
    # and one NotReadyRetry was counted
    retries = metric_values(emf_blobs(capsys.readouterr().out), "NotReadyRetry")
    assert [value for value, _ in retries] == [1.0]


def test_worker_ensure_busy_until_final_receive_gets_terminal_outcome_then_dlq(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a zombie child: every transfer answers "workspace not ready"
    _seed(sim, _child(prompts=(150, 200)))
    sim.faults(stuck=[CHILD])
    request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    max_receives = worker.resources.max_receive_count
    per_invocation = 1 + worker.runtime.settings.ensure_not_ready_retries

    # When the queue delivers it until the redrive policy's last receive
    for receive in range(1, max_receives + 1):
        invocation = worker.invoke()

        # Then each delivery fails the item; only the final one publishes the terminal outcome
        assert invocation.receive_counts() == [receive]
        assert invocation.failed == invocation.message_ids
        outcomes = outcome_capture.outcomes()
        if receive < max_receives:
            assert outcomes == []
        worker.redeliver_failed(invocation)

    [outcome] = outcome_capture.outcomes()
    assert outcome["request_id"] == request_id
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "workspaceBusy")
    assert outcome["receive_count"] == max_receives
    assert len(api_calls(sim, "transfer")) == max_receives * per_invocation
    assert totals_of(sim)[CHILD] == (1, 200)

    # And the next receive moves it to the DLQ instead of delivering it again
    assert worker.receive() == []
    [dead] = worker.drain_dlq()
    assert json.loads(dead["Body"])["request_id"] == request_id
    assert dead["Attributes"]["MessageGroupId"] == CHILD
    assert REASON_ATTRIBUTE not in dead.get("MessageAttributes", {})


def test_worker_coalesces_consecutive_ensures_into_one_transfer_covering_the_sum(
    worker: AllocatorHarness,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given three ensures for one child (needs 100 + 150 + 120 prompts; used 50 of 100)
    _seed(sim, _child(prompts=(50, 100)))
    needs = [100, 150, 120]
    request_ids = [
        worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": need})
        for need in needs
    ]

    # When they arrive in one batch
    invocation = worker.invoke()

    # Then one transfer covers the sum: used 50 + 370 = 420, plus four blocks (more than the
    # 370 the run asked): 820 (the used project refilled ahead to 1 + 4 = 5)
    assert len(invocation.message_ids) == len(needs)
    assert invocation.failed == []
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 5, "prompts": 820})]
    assert len(api_calls(sim, "read_resources")) == 2  # the child once, the pool once
    outcomes = outcome_capture.outcomes()
    assert sorted(o["request_id"] for o in outcomes) == sorted(request_ids)
    assert {(o["status"], o["coalesced"]) for o in outcomes} == {("topped-up", 3)}
    coalesced = metric_values(emf_blobs(capsys.readouterr().out), "CoalescedEnsures")
    assert [value for value, _ in coalesced] == [2.0]


def test_worker_applies_a_group_in_order_with_a_release_in_between(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given ensure(+200) -> release -> ensure(+50) for a child using 100 of 100 prompts
    _seed(sim, _child(prompts=(100, 100)))
    first = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 200})
    release = worker.producer.enqueue_release(CHILD)
    second = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 50})

    # When the three arrive in one batch
    invocation = worker.invoke()

    # Then Semrush saw them strictly in order: raise to 700 (300 plus four blocks), lower to
    # 100, raise to 550 (150 plus four blocks); each raise also refills the used project ahead
    # (to 1 + 4 = 5), the release takes it back
    assert invocation.failed == []
    assert [(c["op"], c["workspace_id"]) for c in api_calls(sim)] == [
        ("read_resources", CHILD),
        ("family", MASTER),  # is the parent metered? (cached for the second ensure)
        ("read_resources", MASTER),
        ("transfer", CHILD),
        ("read_resources", CHILD),
        ("transfer", CHILD),
        ("status", CHILD),  # the release settles before the next mutation
        ("read_resources", CHILD),
        ("read_resources", MASTER),
        ("transfer", CHILD),
    ]
    assert [body["prompts"] for _, _, body in transfer_bodies(sim)] == [700, 100, 550]
    assert totals_of(sim)[CHILD] == (5, 550)
    assert totals_of(sim)[MASTER] == (POOL[0] - 4, POOL[1] - 450)
    outcomes = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert outcomes[first]["status"] == "topped-up"
    assert outcomes[release]["status"] == "released"
    assert outcomes[release]["totals_after"] == {"projects": 1, "prompts": 100}
    assert outcomes[second]["status"] == "topped-up"
    assert outcomes[second]["totals_after"] == {"projects": 5, "prompts": 550}


# ---------------------------------------------------------------- kill switch


@pytest.mark.parametrize("switch", [None, "false", "TRUE"])
def test_worker_kill_switch_off_ensure_makes_no_semrush_call(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    switch: str | None,
) -> None:
    # Given the kill switch unset or anything but the exact string "true"
    _seed(sim, _child(prompts=(150, 200)))
    with allocator_harness(local_resources, sim, {"SERENITY_DYNAMIC_ALLOCATION": switch}) as worker:
        request_id = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})

        # When the worker handles an ensure
        invocation = worker.invoke()

    # Then nothing reached Semrush and the outcome says disabled
    assert invocation.failed == []
    assert api_calls(sim) == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == (request_id, "disabled")


def test_worker_kill_switch_off_still_runs_releases(
    local_resources: LocalResources, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given the kill switch off and a child holding 400 prompts while using 150
    _seed(sim, _child(prompts=(150, 400)))
    with allocator_harness(local_resources, sim, {"SERENITY_DYNAMIC_ALLOCATION": None}) as worker:
        worker.producer.enqueue_release(CHILD)

        # When the worker handles a release
        worker.invoke()

    # Then the surplus went back to the pool (150 used -> 200 in blocks)
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 1, "prompts": 200})]
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "released"


# ---------------------------------------------------------------- invalid messages


def test_worker_sends_invalid_messages_to_the_dlq_with_their_reason(
    worker: AllocatorHarness, sim: SimulatorServer
) -> None:
    # Given three invalid messages: bad JSON, a schema error, a group id that is not the child
    _seed(sim, _child(prompts=(150, 200)), _child(OTHER_CHILD, prompts=(0, 100)))
    valid = {
        "version": 1,
        "kind": "ensure",
        "request_id": "req-valid-shape",
        "workspace_id": CHILD,
        "parent_workspace_id": MASTER,
        "need": {"projects": 0, "prompts": 230},
    }
    bad_json = '{"version": 1, "kind": "ensure", '
    schema_error = json.dumps({**valid, "request_id": "req-neg", "need": {"prompts": -5}})
    wrong_group = json.dumps({**valid, "request_id": "req-wrong-group"})
    sent = {
        worker.send_raw(bad_json, group_id=CHILD, dedup_id="d-bad-json"): bad_json,
        worker.send_raw(schema_error, group_id=CHILD, dedup_id="d-schema"): schema_error,
        worker.send_raw(wrong_group, group_id=OTHER_CHILD, dedup_id="d-group"): wrong_group,
    }

    # When the worker handles them
    invocation = worker.invoke()

    # Then all three completed, none reached Semrush, and each sits in the DLQ with its reason
    assert sorted(invocation.message_ids) == sorted(sent)
    assert invocation.failed == []
    assert api_calls(sim) == []
    assert _queue_is_empty(worker)
    dead = worker.drain_dlq()
    reasons = {m["Body"]: m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] for m in dead}
    assert set(reasons) == set(sent.values())  # the original bodies, unchanged
    assert reasons[bad_json].startswith("body: not valid JSON")
    assert "need.prompts" in reasons[schema_error]
    assert reasons[wrong_group] == "MessageGroupId: must equal workspace_id"


# ---------------------------------------------------------------- batch response


def test_worker_partial_batch_response_fails_only_the_busy_group(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given one batch over three children where CHILD is a zombie:
    #   OTHER ensure (hot path), CHILD ensure (busy), THIRD release, CHILD release
    _seed(
        sim,
        _child(prompts=(150, 200)),
        _child(OTHER_CHILD, projects=(1, 3), prompts=(0, 500)),  # two projects to spare
        _child(THIRD_CHILD, prompts=(0, 300)),
    )
    sim.faults(stuck=[CHILD])
    worker.producer.enqueue_ensure(OTHER_CHILD, MASTER, {"projects": 0, "prompts": 10})
    busy_ensure = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    worker.producer.enqueue_release(THIRD_CHILD)
    held_release = worker.producer.enqueue_release(CHILD)

    # When the worker handles the batch
    invocation = worker.invoke()

    # Then exactly the busy ensure and the release behind it in its group are reported, by
    # message id, and the other children completed
    by_request = {
        json.loads(r["body"])["request_id"]: r["messageId"] for r in invocation.event["Records"]
    }
    assert invocation.response == {
        "batchItemFailures": [
            {"itemIdentifier": by_request[busy_ensure]},
            {"itemIdentifier": by_request[held_release]},
        ]
    }
    # the held release never reached Semrush (its group was skipped after the failure)
    assert [c["op"] for c in api_calls(sim) if c["workspace_id"] == CHILD] == [
        "read_resources",
        "transfer",
        "transfer",
        "transfer",
    ]
    assert {o["workspace_id"]: o["status"] for o in outcome_capture.outcomes()} == {
        OTHER_CHILD: "hot-path",
        THIRD_CHILD: "released",
    }


def test_worker_invalid_message_behind_a_failed_one_waits_its_turn(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a busy ensure with a malformed message behind it in the same group, and another
    # child's ensure in the same batch
    _seed(sim, _child(prompts=(150, 200)), _child(OTHER_CHILD, prompts=(0, 500)))
    sim.faults(stuck=[CHILD])
    busy = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    malformed = worker.send_raw('{"kind": "ensure"', group_id=CHILD, dedup_id="d-malformed")
    worker.producer.enqueue_ensure(OTHER_CHILD, MASTER, {"projects": 0, "prompts": 10})

    # When the worker handles the batch
    invocation = worker.invoke()

    # Then the invocation did not blow up: the busy group is held back whole (the malformed
    # message was never looked at, so it is not dead-lettered yet) and the other child completed
    ids = {json.loads(r["body"]).get("request_id"): r["messageId"] for r in _valid(invocation)}
    assert invocation.failed == [ids[busy], malformed]
    assert worker.drain_dlq() == []
    assert [o["workspace_id"] for o in outcome_capture.outcomes()] == [OTHER_CHILD]


def _valid(invocation: Invocation) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for record in invocation.event["Records"]:
        try:
            json.loads(record["body"])
        except json.JSONDecodeError:
            continue
        records.append(record)
    return records


def test_worker_redelivers_a_failed_group_in_its_original_order(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given ensure(+230) then release for one child, whose first three transfers meet
    # "workspace not ready" (more than the in-handler retries absorb)
    _seed(sim, _child(prompts=(150, 200)))
    sim.faults(not_ready_next={CHILD: 1 + worker.runtime.settings.ensure_not_ready_retries})
    ensure = worker.producer.enqueue_ensure(CHILD, MASTER, {"projects": 0, "prompts": 230})
    release = worker.producer.enqueue_release(CHILD, floor={"projects": 1, "prompts": 300})

    # When the first delivery fails and the queue delivers the group again
    first = worker.invoke()
    worker.redeliver_failed(first)
    second = worker.invoke()

    # Then the whole group came back, in order, and was applied in order on the second receive
    assert first.failed == first.message_ids
    assert second.message_ids == first.message_ids
    assert second.receive_counts() == [2, 2]
    assert second.failed == []
    # (the ensure's 380, plus four blocks: 780)
    assert [(s, body["prompts"]) for _, s, body in transfer_bodies(sim)] == [
        (422, 780),
        (422, 780),
        (422, 780),
        (200, 780),  # the ensure, on the redelivery
        (200, 300),  # then the release, down to its floor
    ]
    outcomes = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert (outcomes[ensure]["status"], outcomes[ensure]["receive_count"]) == ("topped-up", 2)
    assert outcomes[release]["status"] == "released"
    assert totals_of(sim)[CHILD] == (1, 300)


# ---------------------------------------------------------------- outcome events


def test_worker_publishes_one_outcome_event_per_completed_request(
    worker: AllocatorHarness, sim: SimulatorServer, outcome_capture: OutcomeCapture
) -> None:
    # Given a top-up, a brand-limited ensure and a release, with org and brand labels
    _seed(
        sim,
        _child(prompts=(150, 200)),
        _child(OTHER_CHILD, prompts=(150, 200)),
        _child(THIRD_CHILD, prompts=(0, 300)),
    )
    topped = worker.producer.enqueue_ensure(
        CHILD, MASTER, {"projects": 0, "prompts": 230}, org_id="org-1", brand_id="brand-1"
    )
    limited = worker.producer.enqueue_ensure(
        OTHER_CHILD,
        MASTER,
        {"projects": 0, "prompts": 230},
        ceiling={"projects": 1, "prompts": 300},
    )
    released = worker.producer.enqueue_release(THIRD_CHILD, org_id="org-1")

    # When the worker handles the batch
    worker.invoke()

    # Then each request has exactly one serenity.allocator outcome event with its details
    events = outcome_capture.events()
    assert {(e["source"], e["detail-type"]) for e in events} == {
        (EVENT_SOURCE, OUTCOME_DETAIL_TYPE)
    }
    assert EVENT_SOURCE == "serenity.allocator"
    assert OUTCOME_DETAIL_TYPE == "serenity.allocation.outcome"
    details = {e["detail"]["request_id"]: e["detail"] for e in events}
    assert set(details) == {topped, limited, released}
    # And each carries its order key, the SQS sequence number of its message (ADR 0014; three
    # children, three groups: the numbers are distinct, their order across groups means nothing)
    keys = {int(details[rid].pop("sequence_number")) for rid in (topped, limited, released)}
    assert len(keys) == 3
    assert details[topped] == {
        "request_id": topped,
        "kind": "ensure",
        "workspace_id": CHILD,
        "status": "topped-up",
        "totals_before": {"projects": 1, "prompts": 200},
        "totals_after": {"projects": 5, "prompts": 780},
        "receive_count": 1,
        "coalesced": 1,
        "org_id": "org-1",
        "brand_id": "brand-1",
    }
    assert details[limited]["kind"] == "ensure"
    assert details[limited]["workspace_id"] == OTHER_CHILD
    assert (details[limited]["status"], details[limited]["error_code"]) == (
        "rejected",
        "brandAiLimit",
    )
    assert details[released]["kind"] == "release"
    assert details[released]["status"] == "released"
    assert details[released]["source"] == "service"
    assert details[released]["totals_before"] == {"projects": 1, "prompts": 300}
    assert details[released]["totals_after"] == {"projects": 1, "prompts": 100}
