"""The Semrush token never leaves the client: a sweep with a recognisable token, then a search.

The Sweep handler runs dry and for real with ``SEMRUSH_TOKEN`` set to a canary, against a
simulator that accepts ONLY that token (so it really was sent), with one upstream refusal whose
body echoes the token back (so the error path is exercised too). Then every place the sweep
writes to is searched for the canary: each structured log line (captured with the handler's own
formatter, at DEBUG), the standard logging records, everything printed (EMF metric lines), every
returned result, every message on the queue (bodies and attributes), every object in the
checkpoint bucket, and the refusals' messages.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from serenity_allocator.domain.sweep.errors import SweepRefusedError
from serenity_allocator.handlers.sweep import SweepPayloadError, SweepUpstreamError
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import SimulatorServer
from tests.integration.allocator_harness import api_calls, emf_blobs, metric_values
from tests.integration.sweep_stack import (
    EXPECTED,
    MASTER,
    SweepStack,
    make_stack,
    seed_fleet,
)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

CANARY = "tok-SECRET-canary-123"


@pytest.fixture
def canary_stack(local_resources: LocalResources, sim: SimulatorServer) -> Iterator[SweepStack]:
    """The sweep with the canary as its token; the simulator accepts nothing else."""
    seed_fleet(sim)
    sim.set_auth([CANARY])
    stack = make_stack(local_resources, sim, {"SEMRUSH_TOKEN": CANARY})
    yield stack
    close = getattr(stack.runtime.gateway, "close", None)
    if close is not None:
        close()


def _queue_dump(stack: SweepStack) -> list[str]:
    return [json.dumps(message, default=str) for message in stack.queued()]


def _bucket_dump(stack: SweepStack) -> list[str]:
    bodies = []
    for key in stack.checkpoint_keys():
        obj = stack.s3.get_object(Bucket=stack.resources.bucket, Key=key)
        bodies.append(key + obj["Body"].read().decode("utf-8"))
    return bodies


def test_sweep_token_appears_in_no_log_message_checkpoint_result_or_metric(
    canary_stack: SweepStack,
    service_log_lines: io.StringIO,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    stack = canary_stack
    caplog.set_level(logging.DEBUG)
    # Given an upstream refusal on one child whose body echoes the token back (not retried)
    stack.sim.faults(
        fail_next=[
            {
                "status": 403,
                "count": 1,
                "op": "status",
                "workspace_id": "c-lean",
                "body": {"message": f"invalid access attempt with Bearer {CANARY}"},
            }
        ]
    )
    returned: list[Any] = []

    # When a dry run and a real run go through, and two refused invocations are tried
    returned.append(stack.invoke({"parent_workspace_ids": [MASTER], "rate_limit_ms": 0}))
    returned.append(
        stack.invoke({"parent_workspace_ids": [MASTER], "dry_run": False, "rate_limit_ms": 0})
    )
    refusals: list[str] = []
    with pytest.raises(SweepPayloadError) as bad_payload:
        stack.invoke({"parent_workspace_ids": [MASTER], "limit": -1})
    refusals.append(str(bad_payload.value))
    stack.runtime.settings = stack.runtime.settings.model_copy(update={"dynamic_allocation": False})
    with pytest.raises(SweepRefusedError) as refused:
        stack.invoke({"parent_workspace_ids": [MASTER], "dry_run": False})
    refusals.append(str(refused.value))

    # Then the token really was used (the simulator accepts nothing else) and echoed once
    calls = api_calls(stack.sim)
    assert calls and {c["status"] for c in calls} <= {200, 403}
    # (a 403 is access denied: the token may not reach that child)
    assert [r["outcome"] for r in returned[0]["items"] if r["workspace_id"] == "c-lean"] == [
        "access-denied"
    ]
    assert returned[1]["counts"]["enqueued"] == len(EXPECTED)

    # And the capture is not vacuous: per-child log lines and the dry-run metric are there
    printed = capsys.readouterr()
    logged = service_log_lines.getvalue()
    assert logged.count('"message":"sweep item"') == 10
    assert metric_values(emf_blobs(printed.out), "ReleaseOutcome")

    # And the token is nowhere the sweep writes
    places: dict[str, list[str]] = {
        "structured log line": logged.splitlines(),
        "logging record": [record.getMessage() for record in caplog.records]
        + [json.dumps(record.__dict__, default=str) for record in caplog.records],
        "printed line (EMF)": (printed.out + printed.err).splitlines(),
        "returned result": [json.dumps(result) for result in returned],
        "queue message": _queue_dump(stack),
        "checkpoint object": _bucket_dump(stack),
        "refusal message": refusals,
    }
    leaks = {place: [t for t in texts if CANARY in t] for place, texts in places.items()}
    assert {place: found for place, found in leaks.items() if found} == {}
    # Including a partial token (a prefix long enough to matter)
    assert not any(CANARY[:12] in t for texts in places.values() for t in texts)


@pytest.mark.parametrize(
    "echo",
    [CANARY, quote(CANARY, safe=""), json.dumps({"token": CANARY})[1:-1]],
    ids=["plain", "url-encoded", "json-escaped"],
)
def test_sweep_upstream_body_never_reaches_the_lambda_error(
    canary_stack: SweepStack, service_log_lines: io.StringIO, echo: str
) -> None:
    # Given the family listing (which the whole batch needs) refused with a body that echoes
    # the token, in one of its encodings
    stack = canary_stack
    body = {"message": f"refused for {echo}; internal detail xyz-body-marker"}
    stack.sim.faults(fail_next=[{"status": 403, "count": 1, "op": "family", "body": body}])

    # When a sweep is invoked
    with pytest.raises(SweepUpstreamError) as failed:
        stack.invoke({"parent_workspace_ids": [MASTER], "rate_limit_ms": 0})

    # Then the Lambda error (what the caller and the Step Functions history see) names the
    # status and the operation only: no body, so no token in any encoding
    assert str(failed.value) == (
        "the upstream answered 403 to list_family; nothing was enqueued by this call, resume "
        "the run with its run_id once the upstream answers again"
    )
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    # And the log says what failed, without the body either
    logged = service_log_lines.getvalue()
    assert '"message":"sweep batch stopped: upstream error"' in logged
    assert "xyz-body-marker" not in logged
    assert CANARY[:12] not in logged and quote(CANARY, safe="")[:12] not in logged
