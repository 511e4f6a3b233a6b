"""A handler's import stays cheap: what the first record needs loads with the first invocation.

The issue's cold-start rule (at most 1.5x a bare ``import boto3``, bench/coldstart.py) is timed
by the benchmark; this guard is not timed. Each test runs a handler in a fresh interpreter and
reads ``sys.modules``: after the import, none of the heavy modules the first invocation needs
(pydantic, the use cases, the runtime's wiring, Powertools' batch utility); after the first
invocation, every one of them, and the invocation's answer is the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.infrastructure._template import EVENTS_DIR, ROOT

DEFERRED_BY_BOTH = (
    "pydantic",
    "serenity_allocator.adapters.observability",
    "serenity_allocator.domain.model",
    "serenity_allocator.handlers.settings",
)
ALLOCATOR_DEFERRED = (
    *DEFERRED_BY_BOTH,
    "aws_lambda_powertools.utilities.batch",
    "serenity_allocator.application.allocator",
    "serenity_allocator.domain.messages",
    "serenity_allocator.handlers.allocator_runtime",
)
SWEEP_DEFERRED = (
    *DEFERRED_BY_BOTH,
    "serenity_allocator.application.sweep.run_batch",
    "serenity_allocator.domain.sweep.model",
    "serenity_allocator.handlers.sweep_runtime",
)

# The handler is imported first, then the stand-in context (Powertools only); the modules are
# read before and after one invocation, and the last stdout line says what was seen.
PROBE = """
import json, sys
import serenity_allocator.handlers.{handler} as handler
from serenity_tools.standins.lambda_context import LocalLambdaContext

deferred = {deferred!r}
before = [name for name in deferred if name in sys.modules]
try:
    answer = handler.lambda_handler(json.loads(sys.stdin.read()), LocalLambdaContext("probe", 60))
except Exception as exc:
    answer = {{"raised": type(exc).__name__}}
after = [name for name in deferred if name in sys.modules]
print(json.dumps({{"before": before, "after": after, "answer": answer}}))
"""

ENV = {
    "SEMRUSH_BASE_URL": "http://127.0.0.1:9",
    "SEMRUSH_TOKEN": "tok-import-probe-never-used",
    "ENVIRONMENT": "unit",
    "MAX_RECEIVE_COUNT": "5",
    "SWEEP_BUCKET": "import-probe-bucket",
    "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/import-probe.fifo",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Static mode with dynamic allocation off (the default): an ensure completes with no call."""


def probe(handler: str, deferred: tuple[str, ...], event: object) -> tuple[dict[str, object], str]:
    """Run the probe in a fresh interpreter; its verdict and its stdout (the log lines)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SEMRUSH_", "SERENITY_"))},
        **ENV,
        "PYTHONPATH": os.pathsep.join(str(ROOT / part) for part in ("src", "tools")),
    }
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(handler=handler, deferred=deferred)],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    verdict: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return verdict, result.stdout


def test_the_allocator_loads_its_use_cases_and_pydantic_with_the_first_record() -> None:
    event = json.loads((EVENTS_DIR / "ensure-one.json").read_text())

    verdict, stdout = probe("allocator", ALLOCATOR_DEFERRED, event)

    assert verdict == {
        "before": [],
        "after": list(ALLOCATOR_DEFERRED),
        "answer": {"batchItemFailures": []},
    }
    lines = [json.loads(line) for line in stdout.splitlines()[:-1] if line.startswith("{")]
    outcomes = [
        (line["request_id"], line["status"])
        for line in lines
        if line.get("message") == "allocation outcome"
    ]
    assert outcomes == [("0b7f3c2e-6a1d-4f5e-9c8b-1a2b3c4d5e01", "disabled")]
    # The entry decoration still flushes the metrics: the cold start, then the record's own.
    emitted = [m["Name"] for line in lines if "_aws" in line for m in _metrics(line)]
    assert emitted == ["ColdStart", "QueueLagMs", "DisabledNoop"]


def _metrics(blob: dict[str, Any]) -> list[dict[str, str]]:
    return [m for directive in blob["_aws"]["CloudWatchMetrics"] for m in directive["Metrics"]]


def test_the_sweep_loads_its_use_cases_and_pydantic_with_the_first_payload() -> None:
    # A payload that is not an object: refused by the model, after the invocation's imports.
    verdict, _stdout = probe("sweep", SWEEP_DEFERRED, ["not", "a", "payload"])

    assert verdict == {
        "before": [],
        "after": list(SWEEP_DEFERRED),
        "answer": {"raised": "SweepPayloadError"},
    }
