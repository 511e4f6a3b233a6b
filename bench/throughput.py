"""Measurement 3: end-to-end throughput on the local stack against the latency bound.

``LocalStack`` (moto in its own single-threaded process, the simulator at 50 ms per call) and
its consumer processes (``start_consumers``), each one a simulated Lambda container running
the real handler. For C = 1, 2, 4, 8 consumers the same workload is fed and timed from the
consumers' own traces: the window runs from the first receive that returned messages to the
last delete, so process start-up is reported apart. The feeder keeps the queue shallow (as a
steady production queue is): moto's FIFO receive walks every queued message, about 0.7 ms
each, so a 600-message backlog alone made each receive cost 0.4-0.6 s here.

The bound is ``C / (calls per message x 50 ms)``, with calls per message counted from the
simulator's call log of that very run. The consumers' traces split each consumer's time into
upstream latency (calls x 50 ms), the rest of the handler (CPU, HTTP, outcome events), broker
calls (receive and delete) and idle polling, which is where the gap to the bound goes.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from serenity_allocator.adapters.sqs import AllocationProducer, build_ensure
from serenity_tools.standins.consumer_pool import ConsumerPool
from serenity_tools.standins.stack import LocalStack
from serenity_tools.standins.traces import read_trace_events

from .common import note, ratio

LATENCY_MS = 50.0
CHILDREN = 200
TARGET_EFFICIENCY = 0.7
CPUS = os.cpu_count() or 1


def _seed(children: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    seed: list[dict[str, Any]] = [
        {"id": "org-e", "ai": {"projects": {"total": 10_000}, "prompts": {"total": 1_000_000}}}
    ]
    for i in range(children):
        # Some children are close to their total, so a share of ensures tops up.
        seed.append(
            {
                "id": f"e2e-{i:03d}",
                "parent_id": "org-e",
                "ai": {
                    "projects": {"total": 2, "used": 1},
                    "prompts": {"total": 100, "used": rng.randrange(0, 101)},
                },
            }
        )
    return seed


def _requests(level: int, messages: int, children: int) -> list[Any]:
    """Round-robin over the children, so a receive sees many groups, as producers interleave."""
    return [
        build_ensure(
            f"e2e-{n % children:03d}",
            "org-e",
            {"prompts": 30},
            request_id=f"e2e-c{level}-{n:05d}",
        )
        for n in range(messages)
    ]


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("ev") == kind]


def _released(events: list[dict[str, Any]], key: str) -> int:
    """How many message ids the consumers' release events list under key (deleted, failures)."""
    return sum(len(e.get(key, [])) for e in _of(events, "release"))


def _busy_s(receives: list[dict[str, Any]], releases: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds in the handler (receive to release), in receive calls and in delete calls."""
    by_batch = {(e["pid"], e["batch"]): e for e in receives}
    return {
        "handler_s": sum(e["t"] - by_batch[(e["pid"], e["batch"])]["t"] for e in releases),
        "receive_s": sum(e["t"] - e["t_req"] for e in receives),
        "delete_s": sum(e["t_done"] - e["t"] for e in releases),
    }


def _window(events: list[dict[str, Any]]) -> dict[str, float]:
    receives = _of(events, "receive")
    releases = _of(events, "release")
    if not receives or not releases:
        return {}
    starts = [e.get("startup_s", 0.0) for e in _of(events, "start")]
    return {
        "window_s": max(e["t_done"] for e in releases) - min(e["t_req"] for e in receives),
        **_busy_s(receives, releases),
        "batches": float(len(receives)),
        "received": float(sum(len(e.get("msgs", [])) for e in receives)),
        "startup_s_max": max(starts, default=0.0),
    }


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) a live process has used so far; 0 when unreadable."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # Fields 14 and 15 of /proc/PID/stat (utime, stime), counted after "pid (comm)".
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _deleted(paths: list[Any]) -> int:
    return _released(read_trace_events(paths), "deleted")


def _feed(
    pool: ConsumerPool,
    producer: AllocationProducer,
    requests: list[Any],
    sent: int,
    depth: int,
    timeout_s: float,
) -> None:
    """Keep the queue depth messages ahead of the deletes until all are deleted or time is up."""
    messages = len(requests)
    deleted = 0
    deadline = time.monotonic() + timeout_s
    while deleted < messages and time.monotonic() < deadline:
        pool.restart_dead()  # a crashed container is replaced, as Lambda does
        deleted = _deleted(pool.trace_paths)
        wanted = min(messages, deleted + depth)
        if wanted - sent >= 10 or (wanted == messages and sent < messages):
            producer.enqueue_many(requests[sent:wanted])
            sent = wanted
        else:
            time.sleep(0.05)


def _level(stack: LocalStack, consumers: int, messages: int, timeout_s: float) -> dict[str, Any]:
    sim = stack.simulator
    sim.reset()
    sim.seed(_seed(CHILDREN))
    requests = _requests(consumers, messages, CHILDREN)
    producer = AllocationProducer(stack.resources.queue_url, sqs=stack.sqs)
    # Keep the queue shallow, as a steady production queue is: moto's FIFO receive scans
    # every queued message (real SQS does not), so a deep backlog would measure moto.
    depth = 10 * consumers + 30
    sent = min(depth, messages)
    producer.enqueue_many(requests[:sent])
    moto_cpu, self_cpu = _cpu_s(stack.moto.pid), _self_cpu_s()
    started = time.monotonic()
    pool = stack.start_consumers(consumers)
    startup_s = time.monotonic() - started
    try:
        _feed(pool, producer, requests, sent, depth, timeout_s)
        consumers_cpu = sum(_cpu_s(p.pid) for p in pool.live())
        moto_cpu = _cpu_s(stack.moto.pid) - moto_cpu
        self_cpu = _self_cpu_s() - self_cpu
        level_s = time.monotonic() - started
    finally:
        pool.stop()
    events = read_trace_events(pool.trace_paths)
    deleted = _released(events, "deleted")
    calls = len(sim.calls())
    timing = _window(events)
    window = timing.get("window_s", 0.0)
    calls_per_message = calls / max(1, deleted)
    bound = consumers / (calls_per_message * LATENCY_MS / 1000.0)
    achieved = deleted / window if window else 0.0
    capacity = consumers * window  # consumer-seconds available in the window
    upstream_s = calls * LATENCY_MS / 1000.0
    handler_other_s = max(0.0, timing.get("handler_s", 0.0) - upstream_s)
    broker_s = timing.get("receive_s", 0.0) + timing.get("delete_s", 0.0)
    idle_s = max(0.0, capacity - upstream_s - handler_other_s - broker_s)
    failures = _released(events, "failures")
    return {
        "consumers": consumers,
        "messages": messages,
        "drained": deleted >= messages,
        "deleted": deleted,
        "received": int(timing.get("received", 0)),
        "item_failures": failures,
        "restarts": pool.restarts,
        "dlq_visible": stack.dlq_depth().visible,
        "queue_depth_kept": depth,
        "calls": calls,
        "calls_per_message": round(calls_per_message, 3),
        "batches": int(timing.get("batches", 0)),
        "window_s": round(window, 2),
        "consumer_start_s": round(startup_s, 2),
        "achieved_msgs_per_s": round(achieved, 1),
        "bound_msgs_per_s": round(bound, 1),
        "efficiency": ratio(achieved, bound),
        "wall_msgs_per_s": round(deleted / (window + startup_s), 1) if window else 0.0,
        "broker_ms_per_batch": round(1000.0 * broker_s / max(1, timing.get("batches", 1)), 1),
        "handler_other_ms_per_batch": round(
            1000.0 * handler_other_s / max(1, timing.get("batches", 1)), 1
        ),
        "cpu_seconds": {
            "moto": round(moto_cpu, 1),
            "consumers": round(consumers_cpu, 1),
            "bench_process_simulator_feeder": round(self_cpu, 1),
        },
        "moto_cpu_ms_per_batch": round(1000.0 * moto_cpu / max(1, timing.get("batches", 1)), 1),
        "cpu_busy_share": ratio(moto_cpu + consumers_cpu + self_cpu, level_s * CPUS),
        "time_split": {
            "upstream_latency": ratio(upstream_s, capacity),
            "handler_other": ratio(handler_other_s, capacity),
            "broker_receive_delete": ratio(broker_s, capacity),
            "idle_polling": ratio(idle_s, capacity),
        },
    }


def measure(messages: int = 400, levels: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, Any]:
    """Every concurrency level on one local stack."""
    rows: dict[str, Any] = {}
    started = time.monotonic()
    with LocalStack(latency_ms=LATENCY_MS, visibility_timeout_s=10) as stack:
        for consumers in levels:
            note(f"throughput: C={consumers}, {messages} messages, {CHILDREN} children")
            # Generous: the single-threaded broker, not the bound, sets the pace locally.
            timeout_s = 30.0 + messages / 4.0
            rows[str(consumers)] = _level(stack, consumers, messages, timeout_s)
    worst = min((row["efficiency"] or 0.0) for row in rows.values())
    return {
        "latency_ms": LATENCY_MS,
        "children": CHILDREN,
        "messages": messages,
        "scaled_down_from": 2000 if messages < 2000 else None,
        "moto_note": "moto's FIFO receive scans every queued message: the feeder keeps the "
        "queue at 10 x C + 30 messages (sent - deleted) so the broker is not measured at "
        "depth",
        "elapsed_s": round(time.monotonic() - started, 1),
        "rows": rows,
        "targets": {
            "worst_efficiency": worst,
            "target_efficiency": TARGET_EFFICIENCY,
            "met": worst >= TARGET_EFFICIENCY,
        },
    }
