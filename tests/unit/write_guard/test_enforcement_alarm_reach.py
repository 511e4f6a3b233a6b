"""The enforcement-is-back alarms, as deployed, see a documented caller's disguised 405.

A guarded write, built the way README and clients/node/README.md build it (one
``EmfQuotaRetryRecorder`` per process with the deployment's environment and the service's
name), meets the write gate's disguised 405 over real HTTP to the simulator, in Python and in
Node. The EMF lines it prints are matched against template.yaml's two alarms resolved for
``EnvironmentName=prod``: the classifier alarm's metric and exact dimension set, and the retry
alarm's Metrics Insights ``SCHEMA`` and ``WHERE``. Matching is CloudWatch's: a metric alarm
sees a datapoint only under exactly its dimensions; ``SCHEMA(ns, d1, ...)`` only metrics with
exactly those dimension names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.producer import EmfQuotaRetryRecorder, WriteGuard
from serenity_tools.standins.invoke import IntrinsicResolver, parameter_values
from serenity_tools.standins.simulator import SimulatorServer, SimulatorState, start_simulator
from tests.fakes import FakeClock
from tests.infrastructure._template import ROOT, load_template
from tests.unit.write_guard.test_guard import CHILD, InstantAllocator, prompts_writer, seed

ENVIRONMENT = "prod"
GUARD_SCRIPT = Path(ROOT) / "clients" / "node" / "test" / "support" / "guarded-405.js"
_SCHEMA_QUERY = re.compile(
    r'^SELECT (?P<stat>\w+)\((?P<metric>\w+)\) FROM SCHEMA\("(?P<namespace>[^"]+)", '
    r"(?P<dimensions>[^)]+)\) WHERE (?P<where>.+)$"
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sim(clock: FakeClock) -> Iterator[SimulatorServer]:
    with start_simulator(state=SimulatorState(clock=clock, sleep=clock.sleep)) as server:
        yield server


def _alarm(name: str) -> dict[str, Any]:
    template = load_template()
    resolve = IntrinsicResolver(
        template, parameter_values(template, {"EnvironmentName": ENVIRONMENT})
    )
    properties = template["Resources"][name]["Properties"]
    keys = ("Namespace", "MetricName", "Dimensions", "Metrics")
    resolved: dict[str, Any] = resolve.resolve({k: properties[k] for k in keys if k in properties})
    return resolved


def _datapoints(
    lines: list[str], namespace: str, metric: str
) -> Iterator[tuple[dict[str, str], float]]:
    """(dimension name -> value, value) of every datapoint of ``metric`` in the EMF lines."""
    for line in lines:
        blob = json.loads(line)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            names = [m["Name"] for m in directive["Metrics"]]
            if directive["Namespace"] != namespace or metric not in names:
                continue
            values = blob[metric] if isinstance(blob[metric], list) else [blob[metric]]
            for dimension_set in directive["Dimensions"]:
                for value in values:
                    yield {d: blob[d] for d in dimension_set}, float(value)


def classifier_alarm_sum(lines: list[str]) -> float:
    """What ``EnforcementBackClassifierAlarm`` sums: its metric under exactly its dimensions."""
    alarm = _alarm("EnforcementBackClassifierAlarm")
    wanted = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
    return sum(
        value
        for dims, value in _datapoints(lines, alarm["Namespace"], alarm["MetricName"])
        if dims == wanted
    )


def retry_alarm_count(lines: list[str]) -> int:
    """What ``EnforcementBackRetryAlarm``'s query counts: SCHEMA's exact names, WHERE's values."""
    (query,) = _alarm("EnforcementBackRetryAlarm")["Metrics"]
    match = _SCHEMA_QUERY.match(" ".join(query["Expression"].split()))
    assert match is not None, query["Expression"]
    assert match["stat"] == "COUNT"
    schema = {name.strip() for name in match["dimensions"].split(",")}
    where = dict(re.findall(r"(\w+) = '([^']*)'", match["where"]))
    assert where, match["where"]
    return sum(
        1
        for dims, _ in _datapoints(lines, match["namespace"], match["metric"])
        if set(dims) == schema and all(dims[k] == v for k, v in where.items())
    )


def test_a_python_guarded_write_into_the_disguised_405_reaches_both_alarms(
    sim: SimulatorServer, clock: FakeClock
) -> None:
    # Given a full child behind the gate's 9 s lag, and the recorder a service builds once
    seed(sim, (100, 0, 100))
    lines: list[str] = []
    recorder = EmfQuotaRetryRecorder(ENVIRONMENT, service="brands", emit=lines.append)

    # When a guarded write meets the disguised 405 (over HTTP) and recovers after the lag
    with (
        SemrushClient(
            sim.origin, StaticTokenProvider("tok"), config=SemrushClientConfig(max_retries=0)
        ) as client,
        httpx.Client(
            base_url=sim.write_url, headers={"Authorization": "Bearer tok"}, trust_env=False
        ) as http,
    ):
        guard = WriteGuard(
            InstantAllocator(client, clock), CHILD, "m1", recorder=recorder, clock=clock,
            sleep=clock.sleep,
        )  # fmt: skip
        answer = guard.write(prompts_writer(http, 50), need={"prompts": 50}, site="prompts")
    refused = [c["status"] for c in sim.calls() if c["op"] == "write_prompts"]

    # Then the classifier alarm sums one per 405 the gate answered, and the retry alarm
    # counts the one cycle: both > 0, their threshold, in prod
    assert (answer.status_code, refused) == (200, [405, 405, 405, 200])
    assert classifier_alarm_sum(lines) == 3.0
    assert retry_alarm_count(lines) == 1


def test_a_node_guarded_write_into_the_disguised_405_reaches_both_alarms(
    sim: SimulatorServer,
) -> None:
    # Given a full child and no allocator: the gate refuses every attempt
    node = shutil.which("node")
    assert node is not None, "the Node client's tests need node (make setup)"
    seed(sim, (100, 0, 100))

    # When the Node client's guard writes, printing its EMF lines to stdout as in Lambda
    environment = {**os.environ, "WRITE_URL": sim.write_url, "CHILD": CHILD}
    environment |= {"ENVIRONMENT": ENVIRONMENT, "SERVICE": "brands-node"}
    done = subprocess.run(
        [node, str(GUARD_SCRIPT)], env=environment, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    refused = [c["status"] for c in sim.calls() if c["op"] == "write_prompts"]

    # Then every attempt met the 405 (1 + 4 retries), each counted by the classifier alarm,
    # and the exhausted cycle by the retry alarm, in prod, under the Node service's name
    assert refused == [405] * 5
    assert classifier_alarm_sum(lines) == 5.0
    assert retry_alarm_count(lines) == 1
    assert {json.loads(line)["service"] for line in lines} == {"brands-node"}


def test_a_line_of_another_environment_or_a_json_405_reaches_neither_alarm() -> None:
    # Given the lines of a dev service and of a genuine JSON 405 in prod
    lines: list[str] = []
    EmfQuotaRetryRecorder("dev", service="brands", emit=lines.append).record_quota_verdict(True)
    EmfQuotaRetryRecorder("dev", service="brands", emit=lines.append).record("exhausted", 5, "s")
    EmfQuotaRetryRecorder(ENVIRONMENT, service="b", emit=lines.append).record_quota_verdict(False)

    # Then the prod alarms see none of them (the matchers can say no)
    assert (classifier_alarm_sum(lines), retry_alarm_count(lines)) == (0.0, 0)
