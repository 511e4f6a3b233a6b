"""The IMS side of measurement 1: the same workloads with every request acting as its user.

Each child has its own IMS user on the simulator (a member of the child and its pool). Before
a round is enqueued, its service mints a promise token per request with the emitter pair (one
IMS call each, the SERVICE's, counted apart) and hands it over; the worker is the real
``lambda_handler`` with the IMS credential broker of production (``ImsCredentialBroker``:
read, exchange first, bind with the roll's store beside the first reads, invalidate beside
the scrub at the end) over the simulator's IMS.

The one stand-in: the credentials table is a dictionary (:class:`MemoryCredentialStore`), so
the bench needs no AWS; the time per message it adds is the IMS calls' (exchange, invalidate,
over loopback HTTP at latency 0), not DynamoDB's or KMS's. Calls are counted from the
simulator's logs; times are reported as ratios and differences, never asserted.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serenity_allocator.adapters.credential_store import StoredCredential
from serenity_allocator.adapters.ims_client import ImsClient, ImsClientPair
from serenity_allocator.adapters.request_authority import (
    ImsCredentialBroker,
    RequestTokenHolder,
)
from serenity_allocator.domain.messages import EnsureRequest, ReleaseRequest
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime, credential_workers
from serenity_allocator.handlers.settings import (
    AllocatorSettings,
    build_ims_consumer,
    build_semrush_client,
)
from serenity_tools.standins.simulator import SimulatorServer

from .common import allocator_env

Request = EnsureRequest | ReleaseRequest
_TTL_S = 86_400
WORKER_IMS_OPS = ("ims_exchange", "ims_invalidate")
"""The worker's IMS calls (the mint is the service's, at enqueue)."""


@dataclass
class MemoryCredentialStore:
    """The credentials table as a dictionary: put (the producer's), read, roll, scrub.

    ``aws_rtt_s`` stands for one AWS round trip per call it stands in for: a read is a
    GetItem and a KMS Decrypt, a put or a roll a KMS Encrypt and a write, a scrub one write.
    """

    records: dict[str, tuple[str, str]] = field(default_factory=dict)
    aws_rtt_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, request_id: str, workspace_id: str, promise_token: str) -> None:
        self._wait(2)
        with self._lock:
            self.records[request_id] = (workspace_id, promise_token)

    def read(self, request_id: str, workspace_id: str) -> StoredCredential | None:
        self._wait(1)
        with self._lock:
            record = self.records.get(request_id)
        if record is None or record[0] != workspace_id:
            return None
        self._wait(1)  # the decrypt
        return StoredCredential(request_id, workspace_id, record[1], _TTL_S)

    def roll(self, request_id: str, workspace_id: str, promise_token: str) -> None:
        self._wait(2)
        with self._lock:
            self.records[request_id] = (workspace_id, promise_token)

    def scrub(self, request_id: str) -> None:
        self._wait(1)
        with self._lock:
            self.records.pop(request_id, None)

    def _wait(self, round_trips: int) -> None:
        if self.aws_rtt_s > 0:
            time.sleep(round_trips * self.aws_rtt_s)


def ims_env(sim: SimulatorServer, **overrides: str) -> dict[str, str]:
    """The Allocator's IMS-mode environment on the simulator (the loopback consumer pair)."""
    consumer = sim.ims_clients()["consumer"]
    env = allocator_env(sim.origin, **overrides)
    del env["SEMRUSH_TOKEN"]
    env.update(
        {
            "IMS_HOST": sim.origin,
            "IMS_CONSUMER_CLIENT_ID": consumer["client_id"],
            "IMS_CONSUMER_CLIENT_SECRET": consumer["client_secret"],
            "CREDENTIALS_TABLE": "bench-credentials",
            "CREDENTIALS_KEY_ARN": "arn:aws:kms:us-east-1:123456789012:key/bench",
        }
    )
    return env


def ims_runtime(settings: AllocatorSettings, store: MemoryCredentialStore) -> AllocatorRuntime:
    """The runtime ``build_runtime`` makes in IMS mode, over ``store`` instead of DynamoDB."""
    if settings.ims is None:
        raise ValueError("ims_runtime needs IMS settings")
    holder = RequestTokenHolder()
    ims = build_ims_consumer(settings.ims, call_budget_s=settings.aws_call_budget_s)
    broker = ImsCredentialBroker(store, ims, holder)
    holder.broker = broker
    return AllocatorRuntime(
        settings=settings,
        gateway=build_semrush_client(settings.semrush, holder),
        attempt_budget_s=settings.semrush.timeout_s,
        aws_call_budget_s=settings.aws_call_budget_s,
        credentials=broker,
        ims=ims,
        credential_workers=credential_workers(),
    )


class BenchUsers:
    """One IMS user per child; mints a promise per request and hands it to the store."""

    def __init__(self, sim: SimulatorServer, store: MemoryCredentialStore) -> None:
        self._sim = sim
        self._store = store
        self._tokens: dict[str, str] = {}
        self.mint_seconds = 0.0
        """Time spent minting (the services' side), left out of the worker's time."""
        emitter = sim.ims_clients()["emitter"]
        self._ims = ImsClient(
            sim.origin,
            emitter=ImsClientPair(
                emitter["client_id"], emitter["client_secret"], emitter["promise_definition_id"]
            ),
        )

    def add_users(self, seed: Iterable[Mapping[str, Any]]) -> None:
        """A user for every child of the seed (after the simulator was reset and seeded)."""
        for workspace in seed:
            parent = workspace.get("parent_id")
            if parent:
                child = str(workspace["id"])
                self._tokens[child] = self._sim.ims_user(f"user-{child}", [str(parent), child])

    def hand_over(self, requests: Sequence[Request]) -> None:
        """The services' side: mint each request's promise and write its record."""
        started = time.monotonic()
        for request in requests:
            promise = self._ims.mint(self._tokens[request.workspace_id]).promise_token
            self._store.put(request.request_id, request.workspace_id, promise)
        self.mint_seconds += time.monotonic() - started

    def close(self) -> None:
        self._ims.close()


def ims_counts(calls: Sequence[Mapping[str, Any]], requests: int) -> dict[str, Any]:
    """IMS calls by op, the worker's per request, the services' mints per request."""
    by_op = Counter(str(c.get("op")) for c in calls)
    worker = sum(by_op[op] for op in WORKER_IMS_OPS)
    return {
        "ims_calls_by_op": dict(sorted(by_op.items())),
        "ims_calls_per_request": round(worker / requests, 3) if requests else None,
        "mints_per_request": round(by_op["ims_mint"] / requests, 3) if requests else None,
        "ims_refused": sum(1 for c in calls if int(c.get("status", 0)) >= 400),
    }
