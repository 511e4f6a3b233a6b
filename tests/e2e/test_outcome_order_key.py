"""Outcomes carry their order key, and the order check holds on a bus that delivers out of order.

AWS EventBridge promises no delivery order. Each outcome carries the SQS sequence number of the
message that produced it (its position in the child's message group), so a reader sorts by it.
Here the capture shuffles what it delivers; the per-child order check passes by the key, and
fails on the same events with the key removed.
"""

from __future__ import annotations

import random
from pathlib import Path

from serenity_allocator.adapters.sqs import AllocationProducer, build_ensure, build_release
from serenity_tools.standins.outcome_capture import OutcomeCapture
from serenity_tools.standins.stack import LocalStack, drain
from serenity_tools.verification.invariants import check_order, workspaces_by_id
from serenity_tools.verification.ledger_check import read_ledger_table


def _child(child: str, total: int) -> dict[str, object]:
    return {
        "id": child,
        "parent_id": "m",
        "ai": {"projects": {"used": 1, "total": 1}, "prompts": {"used": 100, "total": total}},
    }


def test_order_check_holds_by_the_order_key_on_shuffled_deliveries(tmp_path: Path) -> None:
    with LocalStack(work_dir=tmp_path / "stack") as stack:
        # Given two children, each with a run of releases and ensures (one consumer)
        stack.simulator.seed(
            [
                {
                    "id": "m",
                    "ai": {
                        "projects": {"used": 0, "total": 50},
                        "prompts": {"used": 0, "total": 9000},
                    },
                },
                _child("c1", 100),
                _child("c2", 100),
            ]
        )
        before = workspaces_by_id(stack.simulator.dump()["workspaces"])
        producer = AllocationProducer(stack.resources.queue_url, stack.client("sqs"))
        request_ids: list[str] = []
        for need in (150, 50, 300, 20):
            for child in ("c1", "c2"):
                request_ids.append(
                    producer.enqueue_ensure(child, "m", {"projects": 0, "prompts": need})
                )
                request_ids.append(producer.enqueue_release(child))
        assert drain(stack, consumers=1, timeout_s=300).drained

        # When the outcomes are read through a capture that shuffles its deliveries
        shuffled = OutcomeCapture(
            stack.client("sqs"), stack.outcomes.queue_url, shuffle=random.Random(5)
        ).outcomes()

        # Then they arrive out of enqueue order for some child
        assert sorted(o.request_id for o in shuffled) == sorted(request_ids)
        position = {rid: i for i, rid in enumerate(request_ids)}
        arrival = {
            child: [position[o.request_id] for o in shuffled if o.workspace_id == child]
            for child in ("c1", "c2")
        }
        assert any(seen != sorted(seen) for seen in arrival.values())
        # And every outcome carries an order key that increases in each child's enqueue order
        by_id = {o.request_id: o for o in shuffled}
        for child in ("c1", "c2"):
            keys = [
                int(str(by_id[rid].sequence_number))
                for rid in request_ids
                if by_id[rid].workspace_id == child
            ]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
        # And the ledger record of each request carries the same key
        ledger = read_ledger_table(stack.resources)
        assert {rid: ledger[rid].outcome.sequence_number for rid in request_ids} == {  # type: ignore[union-attr]
            rid: by_id[rid].sequence_number for rid in request_ids
        }
        # And the per-child order check passes by the key
        requests = [
            build_ensure(by_id[rid].workspace_id, "m", request_id=rid)
            if by_id[rid].kind == "ensure"
            else build_release(by_id[rid].workspace_id, request_id=rid)
            for rid in request_ids
        ]
        calls = stack.simulator.calls()
        assert check_order(requests, shuffled, calls, before).passed
        # While on the same deliveries without the key it fails: arrival is not order
        keyless = [o.model_copy(update={"sequence_number": None}) for o in shuffled]
        assert not check_order(requests, keyless, calls, before).passed
