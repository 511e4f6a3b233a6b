"""Measurement 5: sweep targets per second at rate 0, and the checkpoint's share of each target.

The real sweep ``lambda_handler`` runs one invocation over every child of a pool, rate limit
0, against the simulator over HTTP, with the S3 checkpoint on a single-threaded moto server
(started in this process; bucket and queue created by ``local.resources``). The store, the
gateway and the release enqueuer are wrapped in timers, so the time per target splits into
checkpoint saves, upstream calls, enqueues and the rest.

Scenarios: a dry run at latency 0 (the brief's figure) for two pool sizes (the checkpoint is
rewritten whole after every target and grows with the run), a real run at latency 0 (adds the
SQS enqueue of each release), and a dry run at 50 ms upstream latency, the realistic case.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from serenity_allocator.adapters.s3_checkpoint_store import S3CheckpointStore
from serenity_allocator.adapters.semrush import SemrushClient, StaticTokenProvider
from serenity_allocator.adapters.sqs import AllocationProducer
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.sweep.model import StoredCheckpoint
from serenity_allocator.handlers.settings import SweepSettings
from serenity_allocator.handlers.sweep import lambda_handler
from serenity_allocator.handlers.sweep_runtime import SweepRuntime
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.moto_server import start_moto_server
from serenity_tools.standins.resources import (
    LocalResourceNames,
    create_local_resources,
    local_client,
)
from serenity_tools.standins.simulator import SimulatorServer, start_simulator

from .common import BENCH_TOKEN, note, ratio, silenced
from .overhead import TimedGateway

TARGET_SHARE = 0.10


class TimedStore:
    """The checkpoint store with every load and save timed."""

    def __init__(self, inner: S3CheckpointStore) -> None:
        self._inner = inner
        self.save_s = 0.0
        self.saves = 0
        self.load_s = 0.0
        self.bytes_saved = 0

    def load(self, run_id: str) -> StoredCheckpoint | None:
        started = time.perf_counter()
        try:
            return self._inner.load(run_id)
        finally:
            self.load_s += time.perf_counter() - started

    def save(self, run_id: str, body: Mapping[str, Any], *, expected_etag: str | None) -> str:
        started = time.perf_counter()
        try:
            return self._inner.save(run_id, body, expected_etag=expected_etag)
        finally:
            self.save_s += time.perf_counter() - started
            self.saves += 1
            self.bytes_saved += len(str(body))

    def location(self, run_id: str) -> str:
        return self._inner.location(run_id)


class TimedEnqueuer:
    """The release enqueuer (the real SQS producer) with its calls timed."""

    def __init__(self, inner: AllocationProducer) -> None:
        self._inner = inner
        self.seconds = 0.0

    def enqueue_release(
        self,
        workspace_id: str,
        *,
        floor: Totals | None = None,
        source: str = "service",
        run_id: str | None = None,
        request_id: str | None = None,
    ) -> str:
        started = time.perf_counter()
        try:
            return self._inner.enqueue_release(
                workspace_id, floor=floor, source=source, run_id=run_id, request_id=request_id
            )
        finally:
            self.seconds += time.perf_counter() - started


def _seed(sim: SimulatorServer, children: int, latency_ms: float) -> None:
    sim.reset()
    sim.faults(latency_ms=latency_ms)
    seed: list[dict[str, Any]] = [
        {"id": "org-s", "ai": {"projects": {"total": 10_000}, "prompts": {"total": 1_000_000}}}
    ]
    for i in range(children):
        # Every other child holds surplus a release would return; the rest sit at the floor.
        surplus = bool(i % 2)
        seed.append(
            {
                "id": f"sw-{i:04d}",
                "parent_id": "org-s",
                "ai": {
                    "projects": {"total": 2 if surplus else 1, "used": 1},
                    "prompts": {"total": 400, "used": 50}
                    if surplus
                    else {"total": 100, "used": 80},
                },
            }
        )
    sim.seed(seed)


def _run(
    sim: SimulatorServer,
    resources: Any,
    s3: Any,
    sqs: Any,
    *,
    children: int,
    dry_run: bool,
    latency_ms: float,
) -> dict[str, Any]:
    _seed(sim, children, latency_ms)
    env = {
        "SEMRUSH_BASE_URL": sim.origin,
        "SEMRUSH_TOKEN": BENCH_TOKEN,
        "ENVIRONMENT": "bench",
        "SERENITY_DYNAMIC_ALLOCATION": "true",
        "SWEEP_BUCKET": resources.bucket,
        "QUEUE_URL": resources.queue_url,
    }
    settings = SweepSettings.from_env(env)
    client = SemrushClient(sim.origin, StaticTokenProvider(BENCH_TOKEN))
    gateway = TimedGateway(client)
    store = TimedStore(S3CheckpointStore(resources.bucket, s3=s3))
    enqueuer = TimedEnqueuer(AllocationProducer(resources.queue_url, sqs=sqs))
    runtime = SweepRuntime(settings=settings, gateway=gateway, store=store, enqueuer=enqueuer)
    run_id = f"bench-{'dry' if dry_run else 'real'}-{children}-{int(latency_ms)}-{time.time_ns()}"
    event = {
        "parent_workspace_ids": ["org-s"],
        "dry_run": dry_run,
        "rate_limit_ms": 0,
        "batch_size": 10_000,
        "run_id": run_id,
    }
    invocations = 0
    started = time.perf_counter()
    while True:
        invocations += 1
        with silenced():
            result = lambda_handler(event, LocalLambdaContext("bench-sweep", 900.0), runtime)
        if result["done"] or result["aborted"] or invocations > 10:
            break
    elapsed = time.perf_counter() - started
    client.close()
    processed = result["processed"]
    other_s = elapsed - store.save_s - store.load_s - gateway.seconds - enqueuer.seconds
    return {
        "children": children,
        "dry_run": dry_run,
        "latency_ms": latency_ms,
        "processed": processed,
        "done": result["done"],
        "elapsed_s": round(elapsed, 3),
        "targets_per_s": round(processed / elapsed, 1),
        "ms_per_target": round(1000.0 * elapsed / processed, 2),
        "checkpoint_saves": store.saves,
        "checkpoint_ms_per_target": round(1000.0 * (store.save_s + store.load_s) / processed, 2),
        "checkpoint_ms_per_save": round(1000.0 * store.save_s / max(1, store.saves), 2),
        "checkpoint_kb_last": round(store.bytes_saved / max(1, store.saves) / 1024.0, 1),
        "upstream_ms_per_target": round(1000.0 * gateway.seconds / processed, 2),
        "upstream_calls_per_target": round(gateway.calls / processed, 2),
        "enqueue_ms_per_target": round(1000.0 * enqueuer.seconds / processed, 2),
        "other_ms_per_target": round(1000.0 * other_s / processed, 2),
        "checkpoint_share": ratio(store.save_s + store.load_s, elapsed),
        "enqueued": result["counts"]["enqueued"],
    }


SCENARIOS: tuple[tuple[str, int, bool, float], ...] = (
    ("dry_200_latency0", 200, True, 0.0),
    ("dry_600_latency0", 600, True, 0.0),
    ("real_200_latency0", 200, False, 0.0),
    ("dry_60_latency50", 60, True, 50.0),
)


def measure() -> dict[str, Any]:
    """Every scenario on one moto server and one simulator."""
    rows: dict[str, Any] = {}
    with (
        start_moto_server() as moto,
        start_simulator(accepted_tokens=[BENCH_TOKEN]) as sim,
    ):
        resources = create_local_resources(
            moto.endpoint_url, LocalResourceNames().with_suffix("bench")
        )
        s3 = local_client("s3", moto.endpoint_url)
        sqs = local_client("sqs", moto.endpoint_url)
        for key, children, dry_run, latency_ms in SCENARIOS:
            note(f"sweep: {key}")
            rows[key] = _run(
                sim,
                resources,
                s3,
                sqs,
                children=children,
                dry_run=dry_run,
                latency_ms=latency_ms,
            )
    headline = rows["dry_200_latency0"]
    return {
        "rows": rows,
        "targets": {
            "checkpoint_share_latency0": headline["checkpoint_share"],
            "checkpoint_share_latency50": rows["dry_60_latency50"]["checkpoint_share"],
            "target_share": TARGET_SHARE,
            "met_latency0": (headline["checkpoint_share"] or 0) < TARGET_SHARE,
            "met_latency50": (rows["dry_60_latency50"]["checkpoint_share"] or 0) < TARGET_SHARE,
        },
    }
