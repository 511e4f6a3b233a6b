"""Twenty requests on one child at once, fronted and wrapped, on the local stack in IMS mode.

Each request is a service request as the README has it: one ``WriteGuard`` with the ledger's
outcome lookup and the default policy (20 s deadline, the gate's 9 s lag), its front sent, then
its write wrapped. The fronts reach the real worker in batches of up to ten; a top-up sized by
the pool keeps room for as much again as a run asked for, so the second batch's fronts find the
room the first batch's writes have not used yet, and no write meets a second lag.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from serenity_allocator.adapters.ledger_outcome_reader import OutcomeReader
from serenity_allocator.domain.messages import EnsureRequest
from serenity_allocator.write_guard import GuardPolicy, WriteGuard, WriteRefusedError
from serenity_tools.standins.identities import LocalIdentities, UserProducer
from serenity_tools.standins.stack import LocalStack
from serenity_tools.verification.write_path import GateClient

REQUESTS = 20
BATCH = 15
"""Prompts each request writes: 300 in all on a child that starts with none to spare."""
CHILD, MASTER, USER = "c-busy", "m-busy", "u-busy"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    """IMS mode (every deployment's), the gate's real 9 s lag."""
    with LocalStack(
        credentials="ims", enforcement_lag_ms=9_000, work_dir=tmp_path / "stack"
    ) as started:
        yield started


class _AsUser:
    """The guard's enqueuer: every ensure under the one user's own credential."""

    def __init__(self, producer: UserProducer) -> None:
        self._producer = producer

    def enqueue(self, request: EnsureRequest) -> str:
        return self._producer.enqueue(request, USER)


def test_twenty_fronted_requests_on_one_child_all_write_within_the_default_deadline(
    stack: LocalStack,
) -> None:
    # Given a pool with room for every request and a child with nothing to spare, its user a
    # member of both, and one consumer running the real worker
    stack.simulator.seed(
        [
            {"id": MASTER, "ai": {"projects": {"used": 0, "total": 50},
                                  "prompts": {"used": 0, "total": 5_000}}},
            {"id": CHILD, "parent_id": MASTER, "ai": {"projects": {"used": 1, "total": 1},
                                                      "prompts": {"used": 100, "total": 100}}},
        ]
    )  # fmt: skip
    identities = LocalIdentities(stack)
    identities.add_user(USER, [MASTER, CHILD])
    enqueuer = _AsUser(identities.producer())
    reader = OutcomeReader(stack.resources.ledger_table, stack.client("dynamodb"))
    stack.start_consumers(1)
    gate = GateClient(stack.simulator.write_url, stack.static_token)

    def one_request(_: int) -> str:
        guard = WriteGuard(enqueuer, CHILD, MASTER, policy=GuardPolicy(), outcomes=reader)
        guard.front({"prompts": BATCH})
        try:
            answer = guard.write(
                lambda: gate.write_prompts(CHILD, BATCH), need={"prompts": BATCH}, site="e2e"
            )
        except WriteRefusedError as refused:
            return refused.code
        return str(answer.status_code)

    # When twenty such requests arrive at once
    try:
        with ThreadPoolExecutor(max_workers=REQUESTS) as pool:
            answers = list(pool.map(one_request, range(REQUESTS)))
    finally:
        gate.close()

    # Then every write landed: none ran out of its deadline, none was refused
    assert answers == ["200"] * REQUESTS
    child = next(w for w in stack.simulator.dump()["workspaces"] if w["id"] == CHILD)
    prompts = child["ai"]["prompts"]
    assert prompts["used"] + prompts.get("drafted", 0) == 100 + REQUESTS * BATCH
