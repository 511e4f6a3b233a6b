"""IMS on the simulator over real HTTP: users, mint, exchange, invalidate, expiry, faults."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serenity_tools.standins.simulator import (
    ImsClientPair,
    ImsConfig,
    SimulatorControlError,
    SimulatorServer,
    SimulatorState,
    start_simulator,
)
from serenity_tools.standins.simulator.cli import _ims_config
from serenity_tools.standins.simulator.model import SimulatorRequestError
from tests.tools.standins.simulator.helpers import (
    MASTER,
    TOKEN,
    FakeClock,
    RecordingSleep,
    family_seed,
)

CHILD = "child-a"


def _post(sim: SimulatorServer, route: str, form: dict[str, str]) -> httpx.Response:
    with httpx.Client(trust_env=False) as client:
        return client.post(sim.origin + route, data=form)


def _mint(sim: SimulatorServer, access_token: str, **override: str) -> httpx.Response:
    emitter = sim.ims_clients()["emitter"]
    form = {
        "client_id": emitter["client_id"],
        "client_secret": emitter["client_secret"],
        "grant_type": "promise",
        "promise_definition_id": emitter["promise_definition_id"],
        "authenticating_token": access_token,
        **override,
    }
    return _post(sim, "/ims/token/v4", form)


def _exchange(sim: SimulatorServer, promise_token: str, **override: str) -> httpx.Response:
    consumer = sim.ims_clients()["consumer"]
    form = {
        "client_id": consumer["client_id"],
        "client_secret": consumer["client_secret"],
        "grant_type": "promise_exchange",
        "promise_token": promise_token,
        **override,
    }
    return _post(sim, "/ims/token/v4", form)


def _invalidate(sim: SimulatorServer, promise_token: str, **override: str) -> httpx.Response:
    consumer = sim.ims_clients()["consumer"]
    form = {
        "client_id": consumer["client_id"],
        "client_secret": consumer["client_secret"],
        "token_type": "promise_token",
        "token": promise_token,
        **override,
    }
    return _post(sim, "/ims/invalidate_token/v2", form)


def _read(sim: SimulatorServer, workspace_id: str, bearer: str) -> httpx.Response:
    with httpx.Client(trust_env=False) as client:
        return client.get(
            f"{sim.api_url}/v1/workspaces/{workspace_id}/resources",
            headers={"Authorization": f"Bearer {bearer}"},
        )


def _seeded(sim: SimulatorServer) -> None:
    sim.seed(family_seed(children=(CHILD,)))


@pytest.fixture
def timed(clock: FakeClock, sleeper: RecordingSleep) -> Iterator[SimulatorServer]:
    config = ImsConfig(promise_ttl_s=600.0, access_ttl_s=120.0, exchanged_ttl_s=45.0)
    state = SimulatorState(clock=clock, sleep=sleeper, ims_config=config)
    with start_simulator(state=state) as server:
        _seeded(server)
        yield server


# -- users and the Semrush routes ---------------------------------------------------------------


def test_ims_user_token_reads_its_workspaces_and_is_logged_with_its_user(
    sim: SimulatorServer,
) -> None:
    # Given a user who is a member of the master and the child
    _seeded(sim)
    token = sim.ims_user("u1", [MASTER, CHILD])
    # When it reads both
    answers = [_read(sim, MASTER, token).status_code, _read(sim, CHILD, token).status_code]
    # Then both succeed and the call log names the user
    assert answers == [200, 200]
    assert [call.get("user") for call in sim.calls()] == ["u1", "u1"]
    assert token.startswith("sim-ims-at-")


def test_ims_user_not_a_member_gets_403_invalid_access_attempt(sim: SimulatorServer) -> None:
    _seeded(sim)
    token = sim.ims_user("u1", [MASTER])
    answer = _read(sim, CHILD, token)
    assert answer.status_code == 403
    assert answer.json() == {"message": "invalid access attempt"}


def test_ims_user_memberships_replace_on_a_second_call(sim: SimulatorServer) -> None:
    _seeded(sim)
    first = sim.ims_user("u1", [MASTER, CHILD])
    second = sim.ims_user("u1", [CHILD])
    # Both tokens belong to u1, whose memberships are now the second call's
    assert [_read(sim, MASTER, t).status_code for t in (first, second)] == [403, 403]
    assert [_read(sim, CHILD, t).status_code for t in (first, second)] == [200, 200]


def test_ims_user_without_semrush_record_gets_4xx_everywhere(sim: SimulatorServer) -> None:
    _seeded(sim)
    token = sim.ims_user("ghost", [MASTER, CHILD], semrush_record=False)
    with httpx.Client(trust_env=False, headers={"Authorization": f"Bearer {token}"}) as client:
        statuses = [
            client.get(f"{sim.api_url}/v1/workspaces/{CHILD}/status").status_code,
            client.get(f"{sim.api_url}/v1/workspaces/{MASTER}/family").status_code,
            client.post(
                f"{sim.write_url}/v1/workspaces/{CHILD}/prompts", json={"count": 1}
            ).status_code,
        ]
    assert statuses == [403, 403, 403]


def test_ims_unknown_access_token_is_401_while_the_static_bearer_still_works(
    sim: SimulatorServer,
) -> None:
    _seeded(sim)
    unknown = _read(sim, CHILD, "sim-ims-at-never-issued")
    assert (unknown.status_code, unknown.json()) == (401, {"detail": "Not authenticated"})
    static = _read(sim, CHILD, TOKEN)
    assert static.status_code == 200
    assert "user" not in sim.calls()[-1]


def test_ims_access_token_expires(timed: SimulatorServer, clock: FakeClock) -> None:
    token = timed.ims_user("u1", [CHILD])
    clock.advance(119.0)
    assert _read(timed, CHILD, token).status_code == 200
    clock.advance(1.0)
    assert _read(timed, CHILD, token).status_code == 401


# -- mint, exchange, invalidate ----------------------------------------------------------------


def test_ims_mint_then_exchange_rolls_the_promise_token(sim: SimulatorServer) -> None:
    # Given a promise minted with the emitter pair from a user's access token
    _seeded(sim)
    minted = _mint(sim, sim.ims_user("u1", [CHILD]))
    assert minted.status_code == 200
    assert minted.json()["token_type"] == "promise_token"
    assert minted.json()["expires_in"] == 3600
    first = minted.json()["promise_token"]
    # When the consumer exchanges it
    exchanged = _exchange(sim, first)
    # Then it gets an access token of that user and a NEW promise token
    body = exchanged.json()
    assert exchanged.status_code == 200
    assert set(body) == {
        "access_token",
        "token_type",
        "expires_in",
        "promise_token",
        "promise_token_expires_in",
        "scope",
    }
    # As IMS answers (the published clients' fixtures): an access_token of five minutes
    assert (body["token_type"], body["expires_in"], body["promise_token_expires_in"]) == (
        "access_token",
        300,
        3600,
    )
    assert body["scope"] == "openid,AdobeID,semrush"
    assert body["promise_token"] != first
    assert _read(sim, CHILD, body["access_token"]).status_code == 200
    # And the exchanged token stops working, the new one works
    spent = _exchange(sim, first)
    assert (spent.status_code, spent.json()["error"]) == (401, "invalid_promise_token")
    assert _exchange(sim, body["promise_token"]).status_code == 200


def test_ims_exchange_of_a_token_a_lost_answer_spent_is_logged_answer_lost(
    sim: SimulatorServer,
) -> None:
    # Given an exchange IMS processed whose answer never reached the caller (it exchanges the
    # same token again instead of the rolled one)
    _seeded(sim)
    first = _mint(sim, sim.ims_user("u1", [CHILD])).json()["promise_token"]
    assert _exchange(sim, first).status_code == 200
    # When the old token comes back, it is refused like any spent token
    assert _exchange(sim, first).status_code == 401
    # Then the call log names it answer_lost, with its user
    refusal = sim.ims_calls()[-1]
    assert (refusal["status"], refusal["user"], refusal.get("answer_lost")) == (401, "u1", True)


def test_ims_spent_token_whose_successor_was_used_or_killed_is_not_answer_lost(
    sim: SimulatorServer,
) -> None:
    _seeded(sim)
    # A token whose rolled successor came back (the caller held the answer)
    first = _mint(sim, sim.ims_user("u1", [CHILD])).json()["promise_token"]
    second = _exchange(sim, first).json()["promise_token"]
    assert _exchange(sim, second).status_code == 200
    assert _exchange(sim, first).status_code == 401
    # A chain the caller invalidated
    other = _mint(sim, sim.ims_user("u2", [CHILD])).json()["promise_token"]
    assert _exchange(sim, other).status_code == 200
    assert _invalidate(sim, other).status_code == 200
    assert _exchange(sim, other).status_code == 401
    refusals = [c for c in sim.ims_calls() if c["status"] == 401]
    assert [(c["user"], c.get("answer_lost")) for c in refusals] == [(None, None), (None, None)]


def test_ims_invalidate_kills_the_whole_chain(sim: SimulatorServer) -> None:
    _seeded(sim)
    first = _mint(sim, sim.ims_user("u1", [CHILD])).json()["promise_token"]
    second = _exchange(sim, first).json()["promise_token"]
    third = _exchange(sim, second).json()["promise_token"]
    # Invalidating an EARLIER token of the chain kills the current one too
    answer = _invalidate(sim, first)
    assert (answer.status_code, answer.content) == (200, b"")
    refused = _exchange(sim, third)
    assert refused.status_code == 401
    assert refused.json()["error"] == "invalid_promise_token"
    # A token of the dead chain is still known: invalidating it again is a 200
    assert _invalidate(sim, third).status_code == 200


def test_ims_invalidating_an_unknown_or_expired_token_is_400_invalid_parameter_value(
    timed: SimulatorServer, clock: FakeClock
) -> None:
    unknown = _invalidate(timed, "sim-ims-pt-never-issued")
    assert (unknown.status_code, unknown.json()["error"]) == (400, "invalid_parameter_value")
    promise = _mint(timed, timed.ims_user("u1", [CHILD])).json()["promise_token"]
    clock.advance(600.0)
    expired = _invalidate(timed, promise)
    assert (expired.status_code, expired.json()["error"]) == (400, "invalid_parameter_value")


def test_ims_exchanged_access_token_lives_its_own_short_lifetime(
    timed: SimulatorServer, clock: FakeClock
) -> None:
    # Given an exchanged access token (this simulator: 45 s; the login token lives 120 s)
    login = timed.ims_user("u1", [CHILD])
    exchanged = _exchange(timed, _mint(timed, login).json()["promise_token"]).json()
    assert exchanged["expires_in"] == 45
    # Then it reads until its expires_in, and is refused from then on; the login lives on
    clock.advance(44.0)
    assert _read(timed, CHILD, exchanged["access_token"]).status_code == 200
    clock.advance(1.0)
    assert _read(timed, CHILD, exchanged["access_token"]).status_code == 401
    assert _read(timed, CHILD, login).status_code == 200


def test_ims_accepts_multipart_form_data_as_the_upstream_client_sends_it(
    sim: SimulatorServer,
) -> None:
    # Given the three calls sent as multipart/form-data (httpx's files= makes that body)
    _seeded(sim)
    emitter, consumer = sim.ims_clients()["emitter"], sim.ims_clients()["consumer"]

    def multipart(route: str, form: dict[str, str]) -> httpx.Response:
        parts = {name: (None, value) for name, value in form.items()}
        with httpx.Client(trust_env=False) as client:
            answer = client.post(sim.origin + route, files=parts)
        assert answer.request.headers["content-type"].startswith("multipart/form-data; boundary=")
        return answer

    minted = multipart(
        "/ims/token/v4",
        {
            "client_id": emitter["client_id"],
            "client_secret": emitter["client_secret"],
            "grant_type": "promise",
            "promise_definition_id": emitter["promise_definition_id"],
            "authenticating_token": sim.ims_user("u1", [CHILD]),
        },
    )
    pair = {"client_id": consumer["client_id"], "client_secret": consumer["client_secret"]}
    exchanged = multipart(
        "/ims/token/v4",
        {**pair, "grant_type": "promise_exchange", "promise_token": minted.json()["promise_token"]},
    )
    invalidated = multipart(
        "/ims/invalidate_token/v2",
        {**pair, "token_type": "promise_token", "token": exchanged.json()["promise_token"]},
    )
    # Then IMS answered each as it does the urlencoded form
    assert [minted.status_code, exchanged.status_code, invalidated.status_code] == [200, 200, 200]
    assert _read(sim, CHILD, exchanged.json()["access_token"]).status_code == 200
    # And a multipart body that is not one (no boundary) is a 400, not a crash
    with httpx.Client(trust_env=False) as client:
        broken = client.post(
            sim.origin + "/ims/token/v4",
            content=b"client_id=x",
            headers={"Content-Type": "multipart/form-data"},
        )
    assert broken.status_code == 400


def test_ims_token_without_the_semrush_scope_is_refused_like_a_non_member() -> None:
    # Given a deployment with its Semrush pair and a general pair whose definition lacks it
    general = (
        ImsClientPair("gen-emitter", "gen-secret", "gen-definition", semrush_scope=False),
        ImsClientPair("gen-consumer", "gen-consumer-secret", semrush_scope=False),
    )
    with start_simulator(ims_config=ImsConfig(other_pairs=(general,))) as server:
        _seeded(server)
        login = server.ims_user("u1", [MASTER, CHILD])
        semrush = _mint(server, login).json()["promise_token"]
        mixed = _mint(server, login).json()["promise_token"]
        wrong = _mint(
            server,
            login,
            client_id="gen-emitter",
            client_secret="gen-secret",
            promise_definition_id="gen-definition",
        ).json()["promise_token"]
        gen_consumer = {"client_id": "gen-consumer", "client_secret": "gen-consumer-secret"}
        answers = [
            _exchange(server, semrush).json(),
            _exchange(server, mixed, **gen_consumer).json(),
            _exchange(server, wrong).json(),
        ]
        # Then only the Semrush pair's token reads; the others get the non-member's 403
        assert [a["scope"] for a in answers] == [
            "openid,AdobeID,semrush",
            "openid,AdobeID",
            "openid,AdobeID",
        ]
        reads = [_read(server, CHILD, a["access_token"]) for a in answers]
        assert [(r.status_code, r.json().get("message")) for r in reads] == [
            (200, None),
            (403, "invalid access attempt"),
            (403, "invalid access attempt"),
        ]


def test_ims_invalidate_leaves_other_chains_alive(sim: SimulatorServer) -> None:
    token = sim.ims_user("u1", [CHILD])
    one = _mint(sim, token).json()["promise_token"]
    other = _mint(sim, token).json()["promise_token"]
    _invalidate(sim, one)
    assert _exchange(sim, other).status_code == 200


def test_ims_promise_token_expires_and_an_exchange_resets_the_clock(
    timed: SimulatorServer, clock: FakeClock
) -> None:
    token = timed.ims_user("u1", [CHILD])
    first = _mint(timed, token).json()["promise_token"]
    clock.advance(599.0)
    rolled = _exchange(timed, first).json()
    assert rolled["promise_token_expires_in"] == 600
    clock.advance(599.0)  # 1198 s after the mint: only the rolled token's clock counts
    again = _exchange(timed, rolled["promise_token"])
    assert again.status_code == 200
    clock.advance(600.0)
    assert _exchange(timed, again.json()["promise_token"]).status_code == 401


@pytest.mark.parametrize(
    "override",
    [{"client_id": "sim-consumer"}, {"client_secret": "wrong"}],
    ids=["consumer-id-at-mint", "wrong-secret"],
)
def test_ims_mint_with_a_wrong_pair_is_401(sim: SimulatorServer, override: dict[str, str]) -> None:
    answer = _mint(sim, sim.ims_user("u1", [CHILD]), **override)
    assert (answer.status_code, answer.json()["error"]) == (401, "invalid_client")


def test_ims_exchange_and_invalidate_with_the_emitter_pair_are_401(sim: SimulatorServer) -> None:
    emitter = sim.ims_clients()["emitter"]
    pair = {"client_id": emitter["client_id"], "client_secret": emitter["client_secret"]}
    promise = _mint(sim, sim.ims_user("u1", [CHILD])).json()["promise_token"]
    assert _exchange(sim, promise, **pair).status_code == 401
    assert _invalidate(sim, promise, **pair).status_code == 401
    assert _exchange(sim, promise).status_code == 200  # neither refused call touched it


def test_ims_mint_with_a_dead_user_token_is_401(sim: SimulatorServer) -> None:
    answer = _mint(sim, "sim-ims-at-unknown")
    assert (answer.status_code, answer.json()["error"]) == (401, "invalid_authenticating_token")


def test_ims_malformed_calls_are_400_404_405(sim: SimulatorServer) -> None:
    consumer = sim.ims_clients()["consumer"]
    missing = _post(sim, "/ims/token/v4", {"grant_type": "promise_exchange", **consumer})
    assert (missing.status_code, missing.json()["error_description"]) == (
        400,
        "promise_token is required",
    )
    assert _post(sim, "/ims/token/v4", {"grant_type": "password"}).status_code == 400
    assert _post(sim, "/ims/token/v9", {}).status_code == 404
    with httpx.Client(trust_env=False) as client:
        assert client.get(sim.origin + "/ims/token/v4").status_code == 405


def test_ims_call_log_names_ops_clients_and_users_never_tokens(sim: SimulatorServer) -> None:
    access = sim.ims_user("u1", [CHILD])
    promise = _mint(sim, access).json()["promise_token"]
    rolled = _exchange(sim, promise).json()["promise_token"]
    _invalidate(sim, rolled)
    calls = sim.ims_calls()
    assert [(c["op"], c["client_id"], c["status"], c["user"]) for c in calls] == [
        ("ims_mint", "sim-emitter", 200, "u1"),
        ("ims_exchange", "sim-consumer", 200, "u1"),
        ("ims_invalidate", "sim-consumer", 200, "u1"),
    ]
    dumped = json.dumps(calls)
    assert promise not in dumped and rolled not in dumped and access not in dumped


# -- faults ------------------------------------------------------------------------------------


def test_ims_scripted_faults_hit_only_their_op(sim: SimulatorServer) -> None:
    promise = _mint(sim, sim.ims_user("u1", [CHILD])).json()["promise_token"]
    sim.faults(fail_next=[{"op": "ims_exchange", "status": 429, "retry_after": 1}])
    limited = _exchange(sim, promise)
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "1")
    # The faulted call did not spend the token
    assert _exchange(sim, promise).status_code == 200
    assert [c["status"] for c in sim.ims_calls()] == [200, 429, 200]


def test_ims_timeout_fault_holds_then_504(timed: SimulatorServer, sleeper: RecordingSleep) -> None:
    timed.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=1500)
    answer = _mint(timed, "sim-ims-at-whatever")
    assert answer.status_code == 504
    assert sleeper.calls == [1.5]


def test_ims_reset_forgets_users_and_tokens(sim: SimulatorServer) -> None:
    _seeded(sim)
    token = sim.ims_user("u1", [CHILD])
    sim.reset()
    assert _read(sim, CHILD, token).status_code == 401
    assert sim.ims_calls() == []


# -- control routes and configuration ---------------------------------------------------------


def test_ims_clients_come_from_the_configuration() -> None:
    config = ImsConfig(
        emitter=ImsClientPair("em", "em-secret", "def-1"),
        consumer=ImsClientPair("co", "co-secret"),
    )
    with start_simulator(ims_config=config) as server:
        assert server.ims_clients() == {
            "emitter": {
                "client_id": "em",
                "client_secret": "em-secret",
                "promise_definition_id": "def-1",
            },
            "consumer": {"client_id": "co", "client_secret": "co-secret"},
        }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"workspaces": []}, "user must be a non-empty string"),
        ({"user": "u", "workspaces": "m1"}, "workspaces must be a list of non-empty workspace ids"),
        ({"user": "u", "semrush_record": "no"}, "semrush_record must be a boolean"),
    ],
)
def test_ims_users_route_names_the_bad_field(
    sim: SimulatorServer, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(SimulatorControlError) as caught:
        sim._control("POST", "/__ims/users", body)
    assert (caught.value.status, caught.value.body) == (400, {"message": message})


def test_ims_control_routes_refuse_a_foreign_origin(sim: SimulatorServer) -> None:
    with httpx.Client(trust_env=False) as client:
        answer = client.get(sim.origin + "/__ims/clients", headers={"Origin": "https://evil"})
    assert answer.status_code == 403


def test_ims_config_file_is_parsed_and_validated(tmp_path: Path) -> None:
    good = tmp_path / "ims.json"
    good.write_text(json.dumps({"promise_ttl_s": 60, "consumer": {"client_id": "c"}}))
    with pytest.raises(SimulatorRequestError) as caught:
        _ims_config(good)
    assert caught.value.message == "ims.consumer.client_secret must be a non-empty string"
    good.write_text(json.dumps({"promise_ttl_s": 60, "access_ttl_s": 30}))
    parsed = _ims_config(good)
    assert (parsed.promise_ttl_s, parsed.access_ttl_s, parsed.consumer.client_id) == (
        60.0,
        30.0,
        "sim-consumer",
    )
    assert parsed.exchanged_ttl_s == 300.0  # the default: IMS's five minutes
    good.write_text(json.dumps({"exchanged_ttl_s": 20}))
    assert _ims_config(good).exchanged_ttl_s == 20.0
