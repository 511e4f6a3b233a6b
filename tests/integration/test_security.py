"""Security pass, worker half: the token never leaks; queues are encrypted; control is local.

A full worker batch (a top-up, a release, an invalid message, a busy child driven to its final
receive, and an upstream that echoes the bearer in a 401 body) runs with a recognisable token,
configured first as ``SEMRUSH_TOKEN`` and then as the Secrets Manager secret. The token must
appear in no log line (stdout, stderr and the logging records), no outcome event, no DLQ message
(body or attribute), no metric line and no exception. The sweep's half of the pass lives in
tests/integration/test_sweep_security.py.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import socket
import sys
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from cfnlint.decode import cfn_yaml  # type: ignore[import-untyped]

from serenity_allocator.adapters.observability import logger
from serenity_allocator.adapters.semrush import SemrushClient, StaticTokenProvider
from serenity_allocator.domain.errors import UpstreamError
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import (
    API_PREFIX,
    SimulatorServer,
    SimulatorState,
    is_loopback_peer,
    start_simulator,
)
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import (
    AllocatorHarness,
    Invocation,
    allocator_harness,
    emf_blobs,
    totals_of,
    workspace,
)

# "/", "+" and "=" change under URL-encoding and "/" under PHP-style JSON escaping, so every
# encoded echo below differs from the token as sent.
CANARY = "tok/SECRET+canary=123"
_URL_ENCODED = quote(CANARY, safe="")
_JSON_ESCAPED = json.dumps(CANARY)[1:-1].replace("/", "\\/")  # as PHP's json_encode sends it

# Each way an upstream may echo the bearer back, exactly as it appears in the answer's body.
ECHOES = {
    "as sent": CANARY,
    "url-encoded": _URL_ENCODED,
    "url-encoded, lower-case hex": _URL_ENCODED.replace("%2F", "%2f").replace("%2B", "%2b"),
    "form-encoded": quote_plus(CANARY),
    "json-escaped": _JSON_ESCAPED,
    "json in a json string": json.dumps(_JSON_ESCAPED)[1:-1].replace("/", "\\/"),
    "base64 (basic auth)": base64.b64encode(f"svc:{CANARY}".encode()).decode("ascii"),
}
# The body is text as the upstream sent it (the escapes above are already in place); short
# labels keep the whole redacted body inside the error's 200-character excerpt.
ECHO_BODY = "Not authenticated. " + " ".join(
    f"[{i}:{form}]" for i, form in enumerate(ECHOES.values())
)
TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"

MASTER = "ws-sec-master"
TOPPED = "ws-sec-topped"
RELEASED = "ws-sec-released"
BUSY = "ws-sec-busy"
ECHOED = "ws-sec-echo"


def _powertools_logs_to_captured_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the Powertools Logger's handler at the ``sys.stdout`` capsys captures right now.

    The handler keeps the ``sys.stdout`` of the moment the module was imported (collection
    time), which capsys does not see. Called from the test body: pytest swaps ``sys.stdout``
    between fixture setup and the call.
    """
    handler = logger.registered_handler
    if isinstance(handler, logging.StreamHandler):
        monkeypatch.setattr(handler, "stream", sys.stdout)


def _seed(sim: SimulatorServer) -> None:
    def child(workspace_id: str, used: int, total: int, projects: int = 1) -> dict[str, Any]:
        return workspace(
            workspace_id, parent_id=MASTER, projects=(1, projects), prompts=(used, total)
        )

    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            child(TOPPED, 150, 200),
            child(RELEASED, 100, 400),
            child(BUSY, 150, 200),
            child(ECHOED, 100, 500, projects=3),  # room and two projects to spare: a hot path
        ]
    )
    sim.set_auth([CANARY])
    sim.faults(
        stuck=[BUSY],
        # An upstream that echoes the bearer back in its 401 body, twice (past the one refresh).
        fail_next=[
            {
                "status": 401,
                "count": 2,
                "op": "read_resources",
                "workspace_id": ECHOED,
                "body": ECHO_BODY,
            }
        ],
    )


def _run_full_batch(worker: AllocatorHarness) -> list[Invocation]:
    """Top-up, release, invalid, echoed-401 and busy messages, busy driven to its last receive."""
    need = {"projects": 0, "prompts": 230}
    worker.producer.enqueue_ensure(TOPPED, MASTER, need)
    worker.producer.enqueue_release(RELEASED)
    worker.send_raw('{"kind": "ensure", "need": ', group_id=TOPPED, dedup_id="sec-invalid")
    worker.producer.enqueue_ensure(ECHOED, MASTER, {"projects": 0, "prompts": 10})
    worker.producer.enqueue_ensure(BUSY, MASTER, need)
    invocations = []
    for _receive in range(worker.resources.max_receive_count):
        invocation = worker.invoke()
        invocations.append(invocation)
        worker.redeliver_failed(invocation)
    assert worker.receive() == []  # the busy message has moved to the DLQ
    return invocations


def _everything_said(
    worker: AllocatorHarness,
    invocations: list[Invocation],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    outcome_capture: OutcomeCapture,
) -> dict[str, str]:
    """Every channel the worker speaks through, as text to search."""
    captured = capsys.readouterr()
    records = [
        f"{record.getMessage()} {vars(record)!r} {record.exc_text or ''}"
        for record in caplog.records
    ]
    return {
        "stdout": captured.out,
        "stderr": captured.err,
        "log records": caplog.text + "\n".join(records),
        "metric lines": json.dumps(emf_blobs(captured.out)),
        "outcome events": json.dumps(outcome_capture.events()),
        "dlq messages": json.dumps(worker.drain_dlq(), default=str),
        "exceptions": "\n".join(e for i in invocations for e in i.exceptions),
        "runtime repr": repr(worker.runtime),
    }


def _assert_batch_really_ran(
    worker: AllocatorHarness, invocations: list[Invocation], said: dict[str, str]
) -> None:
    # The token was in use (only it is accepted), and every path under test was taken.
    totals = totals_of(worker.sim)
    assert totals[TOPPED] == (5, 780)  # 380 plus four blocks, the used project refilled to 5
    assert totals[RELEASED] == (1, 100)
    statuses = {e["detail"]["status"] for e in json.loads(said["outcome events"])}
    assert statuses >= {"topped-up", "released", "hot-path", "rejected"}
    assert "serenity-invalid-reason" in said["dlq messages"]
    assert "workspaceBusy" in said["outcome events"]
    assert "UpstreamError" in said["exceptions"]  # the echoed 401, redacted
    assert said["metric lines"] != "[]"
    assert '"message":"allocation outcome"' in said["stdout"]  # the JSON log lines were seen
    assert "allocation outcome" in said["log records"]
    assert invocations[0].failed  # the busy and the echoed messages failed the first time


def test_security_token_never_leaks_from_a_full_worker_batch(
    local_resources: LocalResources,
    sim: SimulatorServer,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the canary token as the plain (loopback) variable
    _powertools_logs_to_captured_stdout(monkeypatch)
    caplog.set_level(logging.DEBUG, logger="serenity-allocator")
    caplog.set_level(logging.DEBUG, logger="serenity_allocator")
    caplog.set_level(logging.DEBUG, logger="aws_lambda_powertools.utilities.batch")
    _seed(sim)
    overrides: dict[str, str | None] = {"SEMRUSH_TOKEN": CANARY}

    # When a full batch runs, the busy message through to its final receive
    with allocator_harness(local_resources, sim, overrides) as worker:
        invocations = _run_full_batch(worker)
        said = _everything_said(worker, invocations, capsys, caplog, outcome_capture)

        # Then every path ran, and the token appears on no channel
        _assert_batch_really_ran(worker, invocations, said)
    leaks = sorted(
        (channel, form)
        for channel, text in said.items()
        for form, echoed in ECHOES.items()
        if echoed in text
    )
    assert leaks == []


def test_security_upstream_error_carries_no_echo_of_the_token_in_any_encoding(
    sim: SimulatorServer,
) -> None:
    # Given an upstream that answers a read with a body echoing the bearer in every encoding
    sim.seed([workspace(ECHOED, projects=(0, 1), prompts=(0, 100))])
    sim.set_auth([CANARY])
    sim.faults(
        fail_next=[
            {"status": 400, "op": "read_resources", "workspace_id": ECHOED, "body": ECHO_BODY}
        ]
    )

    # When the client reads through it
    with (
        SemrushClient(sim.origin, StaticTokenProvider(CANARY)) as client,
        pytest.raises(UpstreamError) as raised,
    ):
        client.read_resources(ECHOED)

    # Then the message, repr and traceback keep the body's shape but none of the echoes
    error = raised.value
    said = str(error) + repr(error) + "".join(traceback.format_exception(error))
    # (the whole body made it into the message: one marker per echo, the last one included;
    # of a base64 echo only the characters that also encode its neighbours remain)
    assert str(error).count("***") == len(ECHOES)
    assert f"[{len(ECHOES) - 1}:" in str(error)
    assert [name for name, echoed in ECHOES.items() if echoed in said] == []
    # And the raw body is still there for the classifiers (never logged)
    assert error.body == ECHO_BODY


# ---------------------------------------------------------------- encryption at rest


def test_security_template_queues_use_sse() -> None:
    # Given the template as CloudFormation parses it
    template = cfn_yaml.load(str(TEMPLATE))
    queues = {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::SQS::Queue"
    }

    # Then the allocation queue and its DLQ exist, and every queue is encrypted at rest
    assert {"AllocationQueue", "AllocationDeadLetterQueue"} <= set(queues)
    dlq_target = queues["AllocationQueue"]["RedrivePolicy"]["deadLetterTargetArn"]
    assert dlq_target == {"Fn::GetAtt": ["AllocationDeadLetterQueue", "Arn"]}
    for name, properties in queues.items():
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties, (
            name
        )


# ---------------------------------------------------------------- simulator control routes


@pytest.mark.parametrize(
    ("peer", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.5", False),
        ("192.168.1.20", False),
        ("0.0.0.0", False),
        ("::ffff:10.0.0.5", False),
        ("fe80::1%eth0", False),
        ("2001:db8::1", False),
        ("localhost", False),  # a name, not a peer address: never trusted
        ("", False),
    ],
)
def test_security_simulator_control_routes_accept_only_loopback_peers(
    peer: str, allowed: bool
) -> None:
    # Given a peer address as the HTTP server reports it / Then only loopback is trusted
    assert is_loopback_peer(peer) is allowed


def _non_loopback_address() -> str | None:
    """An address of this host that is not loopback (no packet is sent), or None."""
    # Connecting a UDP socket only picks the route (and so the local address); it sends nothing.
    for target in ("10.255.255.255", "192.0.2.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect((target, 9))
            except OSError:
                continue
            address = str(probe.getsockname()[0])
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return None


LAN_WORKSPACE = "ws-lan"


@pytest.fixture
def simulator_on_lan() -> Iterator[tuple[str, SimulatorState]]:
    """A seeded simulator bound to a non-loopback address of this host: (origin, state)."""
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    state = SimulatorState()
    state.seed([workspace(LAN_WORKSPACE, projects=(0, 1), prompts=(0, 100))])
    with start_simulator(address, state=state) as server:
        yield server.origin, state


def _status(url: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=None)
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_security_simulator_refuses_control_calls_from_a_non_loopback_client(
    simulator_on_lan: tuple[str, SimulatorState],
) -> None:
    # Given a seeded simulator reached over a non-loopback address
    origin, state = simulator_on_lan

    # When a client calls the control routes and the API over that address
    dump = _status(origin + "/__dump")
    reset = _status(origin + "/__reset", method="POST")
    api = _status(
        origin + API_PREFIX + f"/v1/workspaces/{LAN_WORKSPACE}/resources",
        headers={"Authorization": "Bearer tok-any"},
    )

    # Then the control routes refuse it (the reset changed nothing) while the API answers
    assert (dump, reset) == (403, 403)
    assert [w["id"] for w in state.dump()["workspaces"]] == [LAN_WORKSPACE]
    assert api == 200
