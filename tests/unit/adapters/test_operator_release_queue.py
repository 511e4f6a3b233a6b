"""The Sweep's release queue in IMS mode: with the operator's hand-over, or refusing without."""

from __future__ import annotations

from typing import Any, cast

import pytest

from serenity_allocator.adapters.operator_release_queue import (
    OperatorHandover,
    OperatorReleaseQueue,
)
from serenity_allocator.adapters.request_authority import UserCredential
from serenity_allocator.domain.sweep.errors import SweepReleaseCredentialError


class _Producer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def enqueue_release(self, workspace_id: str, **options: Any) -> str:
        self.calls.append((workspace_id, options))
        return "req-1"


class _Tokens:
    def get_token(self, *, refresh: bool = False) -> str:
        return "operator-access-token"


class _Minter:
    def __init__(self) -> None:
        self.limits: list[float | None] = []

    def limit_time(self, seconds: float | None) -> None:
        self.limits.append(seconds)


def test_a_queue_without_a_handover_refuses_every_release_naming_the_run() -> None:
    # Given IMS mode without the emitter pair or the credentials table
    queue = OperatorReleaseQueue(None)
    queue.limit_time(3.0)  # nothing to bound, and nothing raised

    # When a real run enqueues its first release, Then it stops there, naming the run
    with pytest.raises(SweepReleaseCredentialError) as caught:
        queue.enqueue_release("ws-1", source="sweep", run_id="rs-1")
    assert caught.value.run_id == "rs-1"
    assert repr(queue) == "OperatorReleaseQueue(producer=None)"


def test_a_queue_with_a_handover_sends_the_release_with_the_operators_access_token() -> None:
    # Given the hand-over: a producer, the batch's token holder and the emitter's IMS client
    producer, minter = _Producer(), _Minter()
    handover = OperatorHandover(cast(Any, producer), _Tokens(), cast(Any, minter))
    queue = OperatorReleaseQueue(handover)

    # When the invocation bounds it and a release is enqueued
    queue.limit_time(2.5)
    request_id = queue.enqueue_release("ws-1", source="sweep", run_id="rs-1", request_id="r-9")

    # Then the mint is bounded and the release carries the operator's access token
    assert minter.limits == [2.5]
    assert request_id == "req-1"
    assert producer.calls == [
        (
            "ws-1",
            {
                "floor": None,
                "source": "sweep",
                "run_id": "rs-1",
                "request_id": "r-9",
                "credential": UserCredential.access("operator-access-token"),
            },
        )
    ]
