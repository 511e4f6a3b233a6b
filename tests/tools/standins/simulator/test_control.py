"""The Semrush simulator over real HTTP: auth, routing, usage, control routes, faults, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.semrush import parse_ai_resources
from serenity_allocator.domain.errors import is_metered_quota, is_not_ready
from serenity_tools.standins.simulator import (
    DISGUISED_QUOTA_405,
    SimulatorControlError,
    SimulatorServer,
    SimulatorState,
    configure,
    is_loopback_peer,
    start_simulator,
)
from tests.tools.standins.simulator.helpers import (
    MASTER,
    TOKEN,
    FakeClock,
    RecordingSleep,
    ai_of,
    family_seed,
    transfer_body,
    usage,
)

# ---------------------------------------------------------------------------------------------
# auth, unknown ids, routing
# ---------------------------------------------------------------------------------------------

OPERATION_REQUESTS = [
    ("GET", "/v1/workspaces/{id}/resources", None),
    ("POST", "/v2/workspaces/{id}/resources/transfer", transfer_body(1, 100)),
    ("GET", "/v1/workspaces/{id}/status", None),
    ("GET", "/v1/workspaces/{id}/family", None),
    ("POST", "/v2/workspaces/{id}/child", {"title": "t"}),
]


@pytest.mark.parametrize(("method", "route", "body"), OPERATION_REQUESTS)
@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Basic abc", "token-without-scheme"])
def test_simulator_missing_or_bad_bearer_is_401(
    sim: SimulatorServer,
    method: str,
    route: str,
    body: dict[str, Any] | None,
    authorization: str | None,
) -> None:
    # Given a family
    sim.seed(family_seed())
    headers = {} if authorization is None else {"Authorization": authorization}

    # When an operation is called without a usable bearer
    with httpx.Client(base_url=sim.api_url, trust_env=False) as client:
        response = client.request(method, route.format(id="c1"), json=body, headers=headers)

    # Then it is a 401 with the upstream's body, and nothing changed
    assert response.status_code == 401
    assert response.json() == {"detail": "Not authenticated"}
    assert len(sim.dump()["workspaces"]) == 3


def test_simulator_accepted_tokens_restrict_the_bearer_and_auth_route_changes_them(
    sim: SimulatorServer,
) -> None:
    # Given only "good" is accepted
    sim.seed(family_seed())
    sim.set_auth(["good"])

    def status_with(token: str) -> int:
        with httpx.Client(
            base_url=sim.api_url, headers={"Authorization": f"Bearer {token}"}, trust_env=False
        ) as client:
            return client.get("/v1/workspaces/c1/status").status_code

    # When / Then: "good" passes and anything else is a 401
    assert (status_with("good"), status_with("other")) == (200, 401)

    # When the accepted list is rotated at run time / Then the old token stops working
    sim.set_auth(["rotated"])
    assert (status_with("good"), status_with("rotated")) == (401, 200)

    # When auth is opened again / Then any non-empty bearer passes
    sim.set_auth(None)
    assert status_with("anything") == 200


def test_simulator_constructor_accepted_tokens_apply_and_survive_reset() -> None:
    # Given a simulator started with accepted_tokens
    with start_simulator(accepted_tokens=["only"]) as server:
        server.seed(family_seed())
        server.set_auth(None)

        # When it is reset
        server.reset()
        server.seed(family_seed())

        # Then the constructor's tokens apply again
        with httpx.Client(base_url=server.api_url, trust_env=False) as client:
            wrong = client.get("/v1/workspaces/c1/status", headers={"Authorization": "Bearer x"})
            right = client.get("/v1/workspaces/c1/status", headers={"Authorization": "Bearer only"})
        assert (wrong.status_code, right.status_code) == (401, 200)


@pytest.mark.parametrize(("method", "route", "body"), OPERATION_REQUESTS)
def test_simulator_unknown_workspace_is_403(
    sim: SimulatorServer, api: httpx.Client, method: str, route: str, body: dict[str, Any] | None
) -> None:
    # Given a family without "ghost"
    sim.seed(family_seed())

    # When an operation names "ghost"
    response = api.request(method, route.format(id="ghost"), json=body)

    # Then it is the upstream's 403
    assert response.status_code == 403
    assert response.json() == {"message": "invalid access attempt"}


def test_simulator_wrong_method_is_a_plain_405_and_unknown_path_a_404(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a family
    sim.seed(family_seed())

    # When a known path is called with the wrong method, and an unknown path is called
    wrong_method = api.get("/v2/workspaces/c1/resources/transfer")
    unknown = api.get("/v1/workspaces/c1/nothing")

    # Then the 405 is plain (not the disguised quota one) and the other is a 404
    assert wrong_method.status_code == 405
    assert not is_metered_quota(wrong_method.status_code, wrong_method.text)
    assert unknown.status_code == 404
    assert sim.calls() == []


# ---------------------------------------------------------------------------------------------
# usage: metered and unmetered writes
# ---------------------------------------------------------------------------------------------


def test_simulator_usage_sets_absolute_used_and_drafted(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child at 5 / 500
    sim.seed(family_seed())
    api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(5, 500))

    # When usage is reported twice (absolute values, not increments)
    sim.usage({"id": "c1", "projects": {"used": 3}, "prompts": {"used": 250, "drafted": 40}})
    sim.usage({"id": "c1", "prompts": {"used": 260}})

    # Then the last values stand and the untouched fields keep theirs
    resources = parse_ai_resources(api.get("/v1/workspaces/c1/resources").json())
    assert (resources.projects.used, resources.projects.total) == (3, 5)
    assert (resources.prompts.used, resources.prompts.drafted) == (260, 40)


def test_simulator_usage_under_an_unmetered_parent_may_exceed_the_total(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a child with a zero total under a parent whose ai limits_enabled is false
    sim.seed(family_seed(master_limits_enabled=False))

    # When the child uses 3 projects and 250 prompts
    answer = sim.usage({"id": "c1", "projects": {"used": 3}, "prompts": {"used": 250}})

    # Then nothing is refused and the child is over its total
    assert answer["ai"]["projects"] == usage(3, 0)
    resources = parse_ai_resources(api.get("/v1/workspaces/c1/resources").json())
    assert resources.prompts.free == -250


def test_simulator_usage_under_a_metered_parent_is_refused_with_the_disguised_405(
    sim: SimulatorServer,
) -> None:
    # Given a child with 2 projects / 100 prompts under a metered parent
    sim.seed(family_seed(master_limits_enabled=True))
    with httpx.Client(
        base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        client.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(2, 100))

    # When a write would take prompts to 101 (projects staying within 2)
    with pytest.raises(SimulatorControlError) as refused:
        sim.usage({"id": "c1", "projects": {"used": 2}, "prompts": {"used": 101}})

    # Then it is the disguised 405 quota rejection (the nginx page), and nothing was applied
    assert refused.value.status == 405
    assert refused.value.text == DISGUISED_QUOTA_405
    assert is_metered_quota(refused.value.status, refused.value.text)
    assert ai_of(sim.dump(), "c1")["projects"]["used"] == 0

    # And a write within the total is fine
    assert sim.usage({"id": "c1", "prompts": {"used": 100}})["ai"]["prompts"]["used"] == 100


def test_simulator_usage_on_an_unknown_id_or_malformed_body_is_refused(
    sim: SimulatorServer,
) -> None:
    # Given a family
    sim.seed(family_seed())

    # When usage names an unknown id, or carries a bad count
    with pytest.raises(SimulatorControlError) as unknown:
        sim.usage({"id": "ghost", "projects": {"used": 1}})
    with pytest.raises(SimulatorControlError) as malformed:
        sim.usage({"id": "c1", "projects": {"used": -1}})

    # Then they are a 404 and a 400
    assert (unknown.value.status, malformed.value.status) == (404, 400)


# ---------------------------------------------------------------------------------------------
# control routes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "expected"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.5", False),
        ("192.168.1.20", False),
        ("::ffff:10.0.0.5", False),
        ("2001:db8::1", False),
        ("0.0.0.0", False),
        ("localhost", False),
        ("", False),
    ],
)
def test_simulator_is_loopback_peer_accepts_only_loopback_addresses(
    peer: str, expected: bool
) -> None:
    # Given a peer address / When it is checked / Then only loopback passes
    assert is_loopback_peer(peer) is expected


def test_simulator_control_routes_refuse_a_non_loopback_peer(
    monkeypatch: pytest.MonkeyPatch, sim: SimulatorServer
) -> None:
    # Given the loopback predicate says the peer is remote
    import serenity_tools.standins.simulator.control as control_module

    monkeypatch.setattr(control_module, "is_loopback_peer", lambda host: False)

    # When a control route is called
    with pytest.raises(SimulatorControlError) as refused:
        sim.reset()

    # Then it is a 403 and the API routes still work
    assert refused.value.status == 403
    with httpx.Client(
        base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        assert client.get("/v1/workspaces/ghost/status").status_code == 403


def test_simulator_reset_drops_workspaces_faults_and_calls(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given workspaces, faults and calls
    sim.seed(family_seed())
    sim.faults(latency_ms=1, stuck=["c1"], error_rate={"5xx": 0.5})
    api.get("/v1/workspaces/c1/status")

    # When the simulator is reset
    sim.reset()

    # Then everything is back to the start
    dump = sim.dump()
    assert dump["workspaces"] == []
    assert dump["calls"] == []
    assert dump["faults"]["stuck"] == []
    assert dump["faults"]["error_rate"] == {}
    assert dump["faults"]["latency_ms"] == 0


def test_simulator_dump_round_trips_the_seed_shape(sim: SimulatorServer) -> None:
    # Given a seeded family
    seed = [
        {
            "id": MASTER,
            "title": "Org",
            "parent_id": None,
            "status": "created",
            "limits_enabled": True,
            "ai": {
                "projects": usage(1, 10),
                "prompts": usage(5, 1000, drafted=2),
                "weekly_prompts": usage(0, 70),
            },
        },
        {
            "id": "c1",
            "title": "C1",
            "parent_id": MASTER,
            "status": "created",
            "limits_enabled": False,
            "ai": {
                "projects": usage(0, 0),
                "prompts": usage(0, 0),
                "weekly_prompts": usage(0, 0),
            },
        },
    ]
    sim.seed(seed)

    # When it is dumped / Then the workspaces come back in the seed shape
    assert sim.dump()["workspaces"] == seed


@pytest.mark.parametrize(
    "bad_seed",
    [
        [{"id": "c1", "parent_id": "nobody"}],
        [{"id": "a", "parent_id": "b"}, {"id": "b", "parent_id": "a"}],
        [{"id": ""}],
        [{"id": "x"}, {"id": "x"}],
        [{"id": "x", "status": "sleepy"}],
        [{"id": "x", "ai": {"projects": {"used": -1, "total": 1}}}],
        [{"id": "x", "ai": {"tokens": {"used": 1, "total": 1}}}],
    ],
)
def test_simulator_bad_seed_is_400_and_changes_nothing(
    sim: SimulatorServer, bad_seed: list[dict[str, Any]]
) -> None:
    # Given an existing family
    sim.seed(family_seed())
    before = sim.dump()["workspaces"]

    # When a bad seed is posted
    with pytest.raises(SimulatorControlError) as refused:
        sim.seed(bad_seed)

    # Then it is a 400 and the state is untouched
    assert refused.value.status == 400
    assert sim.dump()["workspaces"] == before


def test_simulator_seed_upserts_and_children_inherit_limits_enabled(
    sim: SimulatorServer,
) -> None:
    # Given an unmetered master seeded first
    sim.seed(family_seed(children=(), master_limits_enabled=False))

    # When a child is seeded later without a flag, and the master's title is updated
    sim.seed([{"id": "late", "parent_id": MASTER}])
    sim.seed([{"id": MASTER, "title": "Renamed", "limits_enabled": False}])

    # Then the child inherited the master's flag and the master was replaced in place
    by_id = {w["id"]: w for w in sim.dump()["workspaces"]}
    assert by_id["late"]["limits_enabled"] is False
    assert by_id[MASTER]["title"] == "Renamed"


def test_simulator_faults_omitted_keys_keep_their_value(sim: SimulatorServer) -> None:
    # Given some faults
    sim.faults(latency_ms=3, stuck=["c9"], timeout_hold_ms=50)

    # When only one key is changed
    faults = sim.faults(not_ready_ms=10)

    # Then the others are kept
    assert faults["latency_ms"] == 3
    assert faults["stuck"] == ["c9"]
    assert faults["timeout_hold_ms"] == 50
    assert faults["not_ready_ms"] == 10


@pytest.mark.parametrize(
    "bad_faults",
    [
        {"latency": 1},
        {"latency_ms": -1},
        {"error_rate": {"5xx": 0.7, "429": 0.7}},
        {"error_rate": {"teapot": 0.1}},
        {"fail_next": [{"status": 99}]},
        {"fail_next": [{"status": 503, "op": "delete"}]},
        {"stuck": "c1"},
    ],
)
def test_simulator_bad_faults_are_400(sim: SimulatorServer, bad_faults: dict[str, Any]) -> None:
    # Given a simulator / When bad faults are posted / Then they are refused
    with pytest.raises(SimulatorControlError) as refused:
        sim.faults(**bad_faults)
    assert refused.value.status == 400


# ---------------------------------------------------------------------------------------------
# injected faults
# ---------------------------------------------------------------------------------------------


def test_simulator_fail_next_answers_the_scripted_status_for_the_matching_op_only(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given two 503s scripted for transfers, with a Retry-After
    sim.seed(family_seed())
    sim.faults(fail_next=[{"status": 503, "count": 2, "op": "transfer", "retry_after": 2}])

    # When a status read and three transfers are made
    status = api.get("/v1/workspaces/c1/status")
    transfers = [
        api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))
        for _ in range(3)
    ]

    # Then the status read is untouched, the two next transfers fail, the third succeeds
    assert status.status_code == 200
    assert [t.status_code for t in transfers] == [503, 503, 200]
    assert transfers[0].headers["Retry-After"] == "2"
    assert transfers[0].json() == {"message": "service unavailable"}
    # And the failed attempts moved nothing
    assert ai_of(sim.dump(), "c1")["projects"]["total"] == 1


def test_simulator_fail_next_can_target_a_workspace_and_serve_a_bare_html_body(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a 502 with an HTML body scripted for c2 only
    sim.seed(family_seed())
    sim.faults(fail_next=[{"status": 502, "workspace_id": "c2", "body": "<h1>Bad Gateway</h1>"}])

    # When c1 then c2 are read
    c1 = api.get("/v1/workspaces/c1/resources")
    c2 = api.get("/v1/workspaces/c2/resources")

    # Then only c2 fails, with the bare text/html body
    assert c1.status_code == 200
    assert c2.status_code == 502
    assert c2.headers["Content-Type"].startswith("text/html")
    assert c2.text == "<h1>Bad Gateway</h1>"


@pytest.mark.parametrize(("kind", "expected_statuses"), [("5xx", {500, 502, 503}), ("429", {429})])
def test_simulator_error_rate_one_fails_every_operation(
    sim: SimulatorServer, api: httpx.Client, kind: str, expected_statuses: set[int]
) -> None:
    # Given an error rate of 1 for one kind
    sim.seed(family_seed())
    sim.faults(error_rate={kind: 1.0}, seed=7)

    # When each of the five operations is called
    statuses = {
        api.request(
            method, route.format(id=MASTER if "child" in route else "c1"), json=body
        ).status_code
        for method, route, body in OPERATION_REQUESTS
    }

    # Then every answer is of that kind
    assert statuses <= expected_statuses


def test_simulator_error_rate_not_ready_applies_to_transfers_only(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a not-ready rate of 1
    sim.seed(family_seed())
    sim.faults(error_rate={"not_ready": 1.0})

    # When a status read and a transfer are made
    status = api.get("/v1/workspaces/c1/status")
    transfer = api.post("/v2/workspaces/c1/resources/transfer", json=transfer_body(1, 100))

    # Then only the transfer gets the not-ready 422
    assert status.status_code == 200
    assert transfer.status_code == 422
    assert is_not_ready(transfer.status_code, transfer.text)


def test_simulator_error_rate_is_deterministic_for_a_seed(
    sim: SimulatorServer, api: httpx.Client
) -> None:
    # Given a 50% failure rate with a fixed seed
    sim.seed(family_seed())

    def run() -> list[int]:
        sim.faults(error_rate={"5xx": 0.3, "429": 0.2}, seed=42)
        return [api.get("/v1/workspaces/c1/status").status_code for _ in range(40)]

    # When the same sequence runs twice
    first, second = run(), run()

    # Then it fails the same way both times, with both failures and successes
    assert first == second
    assert 200 in first
    assert any(s >= 500 for s in first)
    assert 429 in first


def test_simulator_timeout_fault_holds_then_answers_504(
    timed_sim: SimulatorServer, timed_api: httpx.Client, sleeper: RecordingSleep
) -> None:
    # Given every request times out, held 20 s by the (injected) sleep
    timed_sim.seed(family_seed())
    timed_sim.faults(error_rate={"timeout": 1.0})

    # When a resources read is made
    response = timed_api.get("/v1/workspaces/c1/resources")

    # Then the request was held for the hold time and then answered 504
    assert response.status_code == 504
    assert sleeper.calls == [20.0]


def test_simulator_timeout_fault_makes_a_short_client_timeout_fire(
    sim: SimulatorServer,
) -> None:
    # Given every request held 300 ms by a real sleep
    sim.seed(family_seed())
    sim.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=300)

    # When a client with a 50 ms timeout asks
    with (
        httpx.Client(
            base_url=sim.api_url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=0.05,
            trust_env=False,
        ) as client,
        pytest.raises(httpx.TimeoutException),
    ):
        client.get("/v1/workspaces/c1/status")

    # Then the client saw a timeout (and the call is logged as a 504)
    assert [c["status"] for c in sim.calls()] == [504]


def test_simulator_latency_is_slept_outside_the_lock(clock: FakeClock) -> None:
    # Given a latency whose sleep only returns once two requests are sleeping together
    barrier = threading.Barrier(2, timeout=5)
    state = SimulatorState(clock=clock, sleep=lambda _seconds: barrier.wait(), latency_ms=5)
    with start_simulator(state=state) as server:
        server.seed(family_seed())

        def read() -> int:
            with httpx.Client(
                base_url=server.api_url,
                headers={"Authorization": f"Bearer {TOKEN}"},
                trust_env=False,
            ) as client:
                return client.get("/v1/workspaces/c1/status").status_code

        # When two requests arrive at once
        with ThreadPoolExecutor(max_workers=2) as pool:
            statuses = list(pool.map(lambda _: read(), range(2)))

    # Then both passed the barrier: their latency overlapped instead of queueing on the lock
    assert statuses == [200, 200]


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_simulator_configure_declares_the_cli_options() -> None:
    # Given the subcommand parser
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)

    # When it parses the documented command line
    args = parser.parse_args(["--host", "127.0.0.1", "--port", "8765", "--latency-ms", "25"])

    # Then the options are there
    assert (args.host, args.port, args.latency_ms, args.tokens) == ("127.0.0.1", 8765, 25.0, None)


def test_simulator_cli_serves_until_sigterm(tmp_path: Path) -> None:
    # Given a seed file and the subcommand started on an ephemeral port
    seed_file = tmp_path / "seed.json"
    seed_file.write_text(json.dumps({"workspaces": family_seed()}), encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serenity_tools.cli",
            "simulator",
            "--port",
            "0",
            "--seed-file",
            str(seed_file),
            "--token",
            "cli-token",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        ready_line = process.stdout.readline()
        api_url = ready_line.strip().split("api=", 1)[1]

        # When the seeded API is called with the accepted token
        with httpx.Client(
            base_url=api_url, headers={"Authorization": "Bearer cli-token"}, trust_env=False
        ) as client:
            status = client.get("/v1/workspaces/c1/status").json()

        # Then it serves, and stops cleanly on SIGTERM
        assert status == {"status": "created"}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_seed_refuses_a_flat_prompts_key_in_a_tiered_workspace(sim: SimulatorServer) -> None:
    # Given a tiered ai object that also carries a flat prompts (neither shape)
    bad = {
        "id": "m",
        "ai": {
            "projects": {"total": 1},
            "daily_prompts": {"used": 0, "total": 5},
            "weekly_prompts": {"used": 0, "total": 5},
            "prompts": {"total": 5},
        },
    }

    # When seeded / Then refused, naming the key
    with pytest.raises(SimulatorControlError) as refused:
        sim.seed([bad])
    assert refused.value.status == 400
    assert refused.value.body == {"message": "workspaces[0].ai has unknown keys: prompts"}
