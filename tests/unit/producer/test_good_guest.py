"""The library is a guest in its caller's process: it leaves the caller's metrics, loggers and
global state exactly as they were.

A calling service with its own Powertools ``Metrics`` (its own namespace, service and
``Environment``) meets a disguised 405 through the producer's classifier and a ``WriteGuard``;
its flushed metric line is byte-for-byte the one it would print without us, and our lines carry
the deployment's environment and the caller's service name. In a fresh interpreter, importing
the producer and running a guarded 405 imports no Powertools and changes no logger, warning
filter, environment variable or botocore initializer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from serenity_allocator.domain.messages import EnsureRequest
from serenity_allocator.producer import (
    EmfQuotaRetryRecorder,
    GuardPolicy,
    WriteGuard,
    is_metered_quota,
)
from serenity_tools.standins.simulator import DISGUISED_QUOTA_405
from tests.fakes import FakeClock

# Now, to the millisecond: Powertools warns about a timestamp CloudWatch would skip.
CALLER_TIMESTAMP = int(time.time() * 1000)
CALLER_LINE = {
    "_aws": {
        "Timestamp": CALLER_TIMESTAMP,
        "CloudWatchMetrics": [
            {
                "Namespace": "BrandsApp",
                "Dimensions": [["Environment", "Tier", "service"]],
                "Metrics": [{"Name": "PromptsCreated", "Unit": "Count"}],
            }
        ],
    },
    "Environment": "blue",
    "Tier": "gold",
    "service": "brands",
    "PromptsCreated": [3.0],
}


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str


class Enqueuer:
    def enqueue(self, request: EnsureRequest) -> str:
        return request.request_id


@pytest.fixture
def powertools_shared_state() -> Iterator[None]:
    """Powertools' ``Metrics`` share their sets across every instance: restore them after."""
    shared = (Metrics._metrics, Metrics._dimensions, Metrics._metadata, Metrics._default_dimensions)
    saved = [dict(part) for part in shared]
    for part in shared:
        part.clear()
    yield
    for part, before in zip(shared, saved, strict=True):
        part.clear()
        part.update(before)


def caller_metrics() -> Metrics:
    metrics = Metrics(namespace="BrandsApp", service="brands")
    metrics.set_default_dimensions(Environment="blue")
    metrics.add_dimension(name="Tier", value="gold")
    metrics.add_metric(name="PromptsCreated", unit=MetricUnit.Count, value=3)
    metrics.set_timestamp(CALLER_TIMESTAMP)
    return metrics


def flushed(metrics: Metrics, capsys: pytest.CaptureFixture[str]) -> list[Any]:
    capsys.readouterr()
    metrics.flush_metrics()
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def guarded_405(recorder: EmfQuotaRetryRecorder) -> int:
    """One guarded write: the disguised 405, then accepted; its final status."""
    clock = FakeClock(0.0)
    answers = iter([Answer(405, DISGUISED_QUOTA_405), Answer(201, "{}")])
    guard = WriteGuard(
        Enqueuer(), "child-1", "master-1", policy=GuardPolicy(), recorder=recorder,
        clock=clock, sleep=clock.sleep,
    )  # fmt: skip
    return guard.write(
        lambda: next(answers), need={"prompts": 3}, site="prompts.create"
    ).status_code


@pytest.mark.usefixtures("powertools_shared_state")
def test_the_callers_own_powertools_metrics_are_unchanged_by_a_classified_405(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given the control: the caller's line as Powertools prints it with no allocator code run
    assert flushed(caller_metrics(), capsys) == [CALLER_LINE]

    # Given a service's own Metrics, with its own Environment and dimension, metrics pending
    metrics = caller_metrics()
    ours: list[str] = []
    recorder = EmfQuotaRetryRecorder("prod", service="brands", emit=ours.append, clock_ms=lambda: 7)

    # When the producer's classifier and a guarded write meet the disguised 405
    assert is_metered_quota(405, DISGUISED_QUOTA_405) is True
    assert guarded_405(recorder) == 201

    # Then the caller's flushed line is exactly the control (no Environment=prod, no dimension
    # added, its own Environment kept), and its defaults are its own
    assert flushed(metrics, capsys) == [CALLER_LINE]
    assert metrics.provider.default_dimensions == {"Environment": "blue"}
    # And our lines: the 405's verdict and the cycle, Environment=prod, the caller's service
    assert [json.loads(line) for line in ours] == [
        {
            "_aws": _directive("MeteredQuotaClassifier", ["Matched"]),
            "Environment": "prod",
            "Matched": "true",
            "service": "brands",
            "MeteredQuotaClassifier": 1,
        },
        {
            "_aws": _directive("QuotaRetryOutcome", ["Outcome", "Site"]),
            "Environment": "prod",
            "Outcome": "recovered",
            "Site": "prompts.create",
            "service": "brands",
            "QuotaRetryOutcome": 2,
        },
    ]


def _directive(name: str, own: list[str]) -> dict[str, Any]:
    return {
        "Timestamp": 7,
        "CloudWatchMetrics": [
            {
                "Namespace": "SerenityAllocator",
                "Dimensions": [["Environment", *own]],
                "Metrics": [{"Name": name, "Unit": "Count"}],
            }
        ],
    }


_FRESH_PROCESS = textwrap.dedent(
    """
    import json, logging, os, sys, warnings
    import botocore

    def state():
        loggers = {
            name: (logger.level, logger.propagate, len(logger.handlers), logger.disabled)
            for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)
        }
        return {
            "root": [logging.root.level, [repr(h) for h in logging.root.handlers]],
            "loggers": loggers,
            "warnings": [repr(f) for f in warnings.filters],
            "environ": dict(os.environ),
            "botocore_initializers": [repr(f) for f in botocore._INITIALIZERS],
        }

    before = state()
    from serenity_allocator.producer import EmfQuotaRetryRecorder, WriteGuard, is_metered_quota
    from serenity_allocator.domain.errors import is_metered_quota as domain_rule

    class Answer:
        def __init__(self, status_code, text):
            self.status_code, self.text = status_code, text

    class Enqueuer:
        def enqueue(self, request):
            return request.request_id

    answers = iter([Answer(405, "<html>405 Not Allowed</html>"), Answer(201, "{}")])
    lines = []
    guard = WriteGuard(Enqueuer(), "child-1", "master-1", sleep=lambda s: None,
                       recorder=EmfQuotaRetryRecorder("prod", service="brands", emit=lines.append))
    guard.write(lambda: next(answers), need={"prompts": 1}, site="s")
    after = state()
    ours = {name for name in after["loggers"]} - {name for name in before["loggers"]}
    print(json.dumps({
        "powertools": sorted(m for m in sys.modules if m.startswith("aws_lambda_powertools")),
        "changed": {
            k: [before[k], after[k]] for k in before if k != "loggers" and before[k] != after[k]
        },
        "loggers_changed": sorted(
            n for n in before["loggers"] if before["loggers"][n] != after["loggers"].get(n)
        ),
        "new_loggers_configured": sorted(
            n for n in ours if after["loggers"][n] != (0, True, 0, False)
        ),
        "one_rule": is_metered_quota is domain_rule,
        "lines": len(lines),
    }))
    """
)


def test_importing_the_producer_and_guarding_a_405_changes_nothing_in_a_fresh_process() -> None:
    # Given a fresh interpreter (no Powertools imported by anyone)
    # When it imports the producer and runs a guarded write through a disguised 405
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)

    # Then no Powertools was imported (its import registers a botocore initializer that
    # rewrites every later client's User-Agent, and reconfigures its package logger), no
    # logger, warning filter, environment variable or initializer changed, and our loggers
    # (the library's own names) were created unconfigured
    assert report == {
        "powertools": [],
        "changed": {},
        "loggers_changed": [],
        "new_loggers_configured": [],
        "one_rule": True,
        "lines": 2,
    }
