"""Measurement 2: the handler's own CPU cost per message, against one upstream round trip.

The real ``lambda_handler`` processes batches of 10 against an in-process, zero-latency
gateway: the simulator's state model (``SimulatorState``) called directly, no HTTP. Every
gateway call is timed, so the handler's own cost (parsing, validation, planning, logging at
INFO, EMF metrics, building and serializing outcome events) is the batch time minus the time
spent inside the gateway. A second gateway puts the real ``SemrushClient`` in front of the
same state through an in-process httpx transport, to show what the client stack adds per call.

The baseline is one upstream round trip at 50 ms, measured in the same run: a real HTTP call
through ``SemrushClient`` to a simulator configured with 50 ms latency.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from serenity_allocator.adapters.eventbridge_outcomes import OutcomePublisher
from serenity_allocator.adapters.semrush import (
    API_PATH,
    SemrushClient,
    StaticTokenProvider,
    parse_ai_resources,
)
from serenity_allocator.domain.errors import UpstreamError
from serenity_allocator.domain.model import AiResources, Totals, WorkspaceRecord
from serenity_allocator.handlers.allocator import lambda_handler
from serenity_allocator.handlers.allocator_runtime import AllocatorRuntime
from serenity_allocator.handlers.settings import AllocatorSettings
from serenity_tools.standins.lambda_context import LocalLambdaContext
from serenity_tools.standins.simulator import SimulatorState, start_simulator

from .common import BENCH_TOKEN, allocator_env, median, note, ratio, silenced
from .fifo import QueuedMessage, lambda_event

UPSTREAM_RTT_MS = 50.0
TARGET_SHARE = 0.02  # under 2 % of one 50 ms round trip, i.e. under 1 ms per message
_AUTH = f"Bearer {BENCH_TOKEN}"


class StateGateway:
    """The domain's WorkspaceGateway straight onto a SimulatorState: no HTTP, no client."""

    def __init__(self, state: SimulatorState) -> None:
        self._state = state

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        raw = b"" if body is None else json.dumps(body).encode()
        answer = self._state.handle_api(method, path, authorization=_AUTH, body=raw)
        if not 200 <= answer.status <= 299:
            raise UpstreamError(answer.status, json.dumps(answer.body), path)
        return answer.body

    def read_resources(self, workspace_id: str) -> AiResources:
        return parse_ai_resources(self._call("GET", f"/v1/workspaces/{workspace_id}/resources"))

    def transfer(self, workspace_id: str, totals: Totals) -> None:
        body = {"resources": {"ai": totals.as_dict()}}
        self._call("POST", f"/v2/workspaces/{workspace_id}/resources/transfer", body)

    def read_status(self, workspace_id: str) -> str:
        return str(self._call("GET", f"/v1/workspaces/{workspace_id}/status")["status"])

    def list_family(self, parent_id: str) -> list[WorkspaceRecord]:
        records = []
        for item in self._call("GET", f"/v1/workspaces/{parent_id}/family"):
            ai = next(t for t in item["product_tiers"] if t["product"]["id"] == "ai")
            records.append(
                WorkspaceRecord(
                    id=item["id"],
                    title=item["title"],
                    status=item["status"],
                    parent_id=item.get("parent_id"),
                    ai_limits_enabled=ai["product"]["limits_enabled"],
                )
            )
        return records


def in_process_client(state: SimulatorState) -> SemrushClient:
    """The real SemrushClient whose httpx transport calls the state model in process."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path[len(API_PATH) :]
        answer = state.handle_api(
            request.method,
            path,
            authorization=request.headers.get("Authorization"),
            body=request.content,
        )
        return httpx.Response(answer.status, json=answer.body, headers=dict(answer.headers))

    http = httpx.Client(transport=httpx.MockTransport(handle))
    return SemrushClient("http://127.0.0.1:9", StaticTokenProvider(BENCH_TOKEN), http=http)


class TimedGateway:
    """Wraps a gateway and adds up the seconds spent inside it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.seconds = 0.0
        self.calls = 0

    def _timed(self, call: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        try:
            return call()
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    def read_resources(self, workspace_id: str) -> AiResources:
        return self._timed(lambda: self._inner.read_resources(workspace_id))  # type: ignore[no-any-return]

    def transfer(self, workspace_id: str, totals: Totals) -> None:
        self._timed(lambda: self._inner.transfer(workspace_id, totals))

    def read_status(self, workspace_id: str) -> str:
        return self._timed(lambda: self._inner.read_status(workspace_id))  # type: ignore[no-any-return]

    def list_family(self, parent_id: str) -> list[WorkspaceRecord]:
        return self._timed(lambda: self._inner.list_family(parent_id))  # type: ignore[no-any-return]


class NullEvents:
    """EventBridge stand-in that accepts every entry (the publisher still serializes them)."""

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "x"} for _ in Entries]}


CHILDREN = 20


def _seed(state: SimulatorState) -> None:
    state.reset()
    ai_child = {"projects": {"total": 2, "used": 1}, "prompts": {"total": 1_000_000, "used": 0}}
    state.seed(
        [
            {
                "id": "org-o",
                "ai": {
                    "projects": {"total": 1_000_000, "used": 0},
                    "prompts": {"total": 1_000_000_000, "used": 0},
                },
            },
            *({"id": f"ws-{i:03d}", "parent_id": "org-o", "ai": ai_child} for i in range(CHILDREN)),
        ]
    )


def _batch(batch_no: int) -> list[QueuedMessage]:
    """Ten ensures for ten different children (the common case: no coalescing)."""
    messages = []
    for slot in range(10):
        child = f"ws-{(batch_no * 10 + slot) % CHILDREN:03d}"
        request_id = f"ov-{batch_no:05d}-{slot}"
        body = json.dumps(
            {
                "version": 1,
                "kind": "ensure",
                "request_id": request_id,
                "workspace_id": child,
                "parent_workspace_id": "org-o",
                "need": {"projects": 0, "prompts": 30},
            }
        )
        messages.append(
            QueuedMessage(
                batch_no * 10 + slot,
                f"m-{request_id}",
                child,
                request_id,
                body,
                int(time.time() * 1000),
                receive_count=1,
            )
        )
    return messages


def _exhaust_children(state: SimulatorState, children: set[str]) -> None:
    """Make every child of the next batch need a top-up: used = total (untimed)."""
    totals = {w["id"]: w["ai"]["prompts"]["total"] for w in state.dump()["workspaces"]}
    for child in children:
        state.usage({"id": child, "prompts": {"used": totals[child]}})


def _run(scenario: str, gateway_kind: str, batches: int, warmup: int) -> dict[str, Any]:
    state = SimulatorState(accepted_tokens=[BENCH_TOKEN])
    _seed(state)
    inner = StateGateway(state) if gateway_kind == "state" else in_process_client(state)
    gateway = TimedGateway(inner)
    settings = AllocatorSettings.from_env(allocator_env("http://127.0.0.1:9"))
    runtime = AllocatorRuntime(
        settings=settings,
        gateway=gateway,
        outcomes=OutcomePublisher("bench-outcomes", events=NullEvents()),  # type: ignore[arg-type]
    )
    events = [lambda_event(_batch(n)) for n in range(warmup + batches)]
    handler_s = 0.0
    gateway_before = 0.0
    calls_before = 0
    for index, event in enumerate(events):
        if scenario == "top-up":
            _exhaust_children(state, {r["attributes"]["MessageGroupId"] for r in event["Records"]})
        if index == warmup:
            handler_s, gateway_before, calls_before = 0.0, gateway.seconds, gateway.calls
        # The template's Allocator timeout: the worker budgets its calls against what is left.
        context = LocalLambdaContext("bench-allocator", 60.0)
        with silenced():
            started = time.perf_counter()
            response = lambda_handler(event, context, runtime)
            handler_s += time.perf_counter() - started
        if response["batchItemFailures"]:
            raise RuntimeError(f"overhead batch failed: {response}")
    messages = batches * 10
    gateway_s = gateway.seconds - gateway_before
    return {
        "total_us": 1e6 * handler_s / messages,
        "gateway_us": 1e6 * gateway_s / messages,
        "own_us": 1e6 * (handler_s - gateway_s) / messages,
        "calls_per_message": (gateway.calls - calls_before) / messages,
    }


def _measured_rtt_ms(samples: int = 15) -> float:
    """Median wall time of one real HTTP read through SemrushClient at 50 ms latency."""
    with start_simulator(latency_ms=UPSTREAM_RTT_MS) as sim:
        sim.seed([{"id": "org-r", "ai": {"prompts": {"total": 1}}}])
        with SemrushClient(sim.origin, StaticTokenProvider(BENCH_TOKEN)) as client:
            client.read_resources("org-r")  # connect once, as a warm container has
            timings = []
            for _ in range(samples):
                started = time.perf_counter()
                client.read_resources("org-r")
                timings.append(1000.0 * (time.perf_counter() - started))
    return median(timings)


def _row(
    scenario: str, gateway_kind: str, runs: list[dict[str, Any]], batches: int, rtt_ms: float
) -> dict[str, Any]:
    """One scenario and gateway: medians over the repeated runs, shares of a round trip."""
    own = median([r["own_us"] for r in runs])
    total = median([r["total_us"] for r in runs])
    return {
        "scenario": scenario,
        "gateway": "SimulatorState in process"
        if gateway_kind == "state"
        else "SemrushClient + httpx, in-process transport",
        "messages": batches * 10,
        "repeats": len(runs),
        "own_us_per_message": round(own, 1),
        "gateway_us_per_message": round(median([r["gateway_us"] for r in runs]), 1),
        "total_us_per_message": round(total, 1),
        "own_us_runs": [round(r["own_us"], 1) for r in runs],
        "calls_per_message": round(runs[0]["calls_per_message"], 3),
        "messages_per_s_own": round(1e6 / own) if own else None,
        "messages_per_s_total": round(1e6 / total) if total else None,
        "share_of_50ms": ratio(own / 1000.0, UPSTREAM_RTT_MS),
        "share_of_measured_rtt": ratio(own / 1000.0, rtt_ms),
    }


def measure(batches: int = 200, warmup: int = 20, repeats: int = 3) -> dict[str, Any]:
    """Messages/s and µs/message per scenario and gateway; median of ``repeats`` runs."""
    rtt_ms = _measured_rtt_ms()
    note(f"overhead: measured round trip at 50 ms latency: {rtt_ms:.1f} ms")
    rows: dict[str, Any] = {}
    for scenario in ("hot-path", "top-up"):
        for gateway_kind in ("state", "client"):
            note(f"overhead: {scenario} via {gateway_kind} gateway ({repeats} x {batches} batches)")
            runs = [_run(scenario, gateway_kind, batches, warmup) for _ in range(repeats)]
            rows[f"{scenario}/{gateway_kind}"] = _row(scenario, gateway_kind, runs, batches, rtt_ms)
    worst = max(row["own_us_per_message"] for row in rows.values())
    return {
        "measured_rtt_ms": round(rtt_ms, 2),
        "nominal_rtt_ms": UPSTREAM_RTT_MS,
        "rows": rows,
        "targets": {
            "worst_own_us_per_message": worst,
            "target_us_per_message": TARGET_SHARE * UPSTREAM_RTT_MS * 1000.0,
            "worst_share_of_measured_rtt": ratio(worst / 1000.0, rtt_ms),
            "met": worst < TARGET_SHARE * UPSTREAM_RTT_MS * 1000.0,
        },
    }
