"""The Allocator acting as the user who asked: IMS promise tokens over real HTTP.

moto serves SQS, EventBridge, DynamoDB (the credentials table and the ledger) and KMS; the
simulator serves Semrush and IMS. Requests are enqueued by the real producer with the user's
access token (it mints the promise token and writes the record), handled by the real
``lambda_handler`` with the production runtime in IMS mode (only its sleep is a recorder).
"""

from __future__ import annotations

import base64
import io
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.dynamodb_request_ledger import DynamoDbRequestLedger
from serenity_allocator.adapters.http_edge import redact_secret
from serenity_allocator.adapters.ims_client import (
    ExchangedTokens,
    ImsClient,
    ImsClientPair,
    ImsPairSecretError,
)
from serenity_allocator.adapters.observability import logger
from serenity_allocator.adapters.request_authority import (
    CredentialHandover,
    RequestTokenHolder,
    UserCredential,
)
from serenity_allocator.adapters.semrush import SemrushClient
from serenity_allocator.adapters.sqs import REASON_ATTRIBUTE
from serenity_allocator.domain.errors import NeedsReauthError
from serenity_allocator.producer import AllocationProducer
from serenity_tools.standins.resources import LocalResources, local_client, put_secret
from serenity_tools.standins.simulator import ImsClientPair as SimulatorPair
from serenity_tools.standins.simulator import ImsConfig, SimulatorServer, start_simulator
from tests.conftest import OutcomeCapture
from tests.integration.allocator_harness import (
    AllocatorHarness,
    allocator_harness,
    api_calls,
    emf_blobs,
    metric_values,
    totals_of,
    transfer_bodies,
    workspace,
)
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack
from tests.integration.slow_aws_proxy import never, slow_proxy, throttled

MASTER = "ws-master"
CHILD = "ws-child-a"
OTHER_CHILD = "ws-child-b"


@pytest.fixture
def stack(aws_env: Any) -> CredentialsStack:
    return create_credentials_stack(aws_env)


@pytest.fixture
def exchanged(monkeypatch: pytest.MonkeyPatch) -> list[ExchangedTokens]:
    """Every exchange's answer (the rolled tokens, for the leak checks)."""
    seen: list[ExchangedTokens] = []
    original = ImsClient.exchange

    def spy(self: ImsClient, promise_token: str) -> ExchangedTokens:
        answer = original(self, promise_token)
        seen.append(answer)
        return answer

    monkeypatch.setattr(ImsClient, "exchange", spy)
    return seen


def _ims(sim: SimulatorServer) -> ImsClient:
    clients = sim.ims_clients()
    return ImsClient(
        sim.origin,
        emitter=ImsClientPair(**clients["emitter"]),
        consumer=ImsClientPair(**clients["consumer"]),
        http=httpx.Client(trust_env=False),
    )


def _ims_env(sim: SimulatorServer, stack: CredentialsStack) -> dict[str, str | None]:
    consumer = sim.ims_clients()["consumer"]
    return {
        "SEMRUSH_TOKEN": None,
        "IMS_HOST": sim.origin,
        "IMS_CONSUMER_CLIENT_ID": consumer["client_id"],
        "IMS_CONSUMER_CLIENT_SECRET": consumer["client_secret"],
        "CREDENTIALS_TABLE": stack.table_name,
        "CREDENTIALS_KEY_ARN": stack.key_id,
    }


@contextmanager
def _worker(
    resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    **extra: str | None,
) -> Iterator[tuple[AllocatorHarness, AllocationProducer]]:
    with allocator_harness(resources, sim, {**_ims_env(sim, stack), **extra}) as harness:
        producer = AllocationProducer(
            resources.queue_url, credentials=CredentialHandover(stack.store(), _ims(sim))
        )
        yield harness, producer


@pytest.fixture
def ims_worker(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> Iterator[tuple[AllocatorHarness, AllocationProducer]]:
    with _worker(local_resources, sim, stack) as pair:
        yield pair


def _seed(sim: SimulatorServer, child_prompts: tuple[int, int] = (150, 200)) -> None:
    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            workspace(CHILD, parent_id=MASTER, projects=(1, 1), prompts=child_prompts),
            workspace(OTHER_CHILD, parent_id=MASTER, projects=(1, 1), prompts=(150, 200)),
        ]
    )


def _u1_promise(sim: SimulatorServer) -> str:
    """A promise token minted for u1, a member of the child and its pool, as a service holds."""
    return _ims(sim).mint(sim.ims_user("u1", [MASTER, CHILD])).promise_token


def _ensure_with(producer: AllocationProducer, credential: UserCredential) -> str:
    """Enqueue the child's 230-prompt ensure from its pool with ``credential``: most tests' ask."""
    return producer.enqueue_ensure(CHILD, MASTER, {"prompts": 230}, credential=credential)


def _consumer_secret(resources: LocalResources, secret_string: str) -> str:
    """Store ``secret_string`` as a fresh Secrets Manager secret; return its name (the id)."""
    name = f"ims-consumer-{uuid.uuid4().hex[:8]}"
    put_secret(local_client("secretsmanager", resources.endpoint_url), name, secret_string)
    return name


def _scrubbed(stack: CredentialsStack, request_id: str) -> bool:
    item = stack.raw_item(request_id)
    return item is not None and "promise_token" not in item and "scrubbed_at" in item


def _is_dead(sim: SimulatorServer, promise_token: str) -> bool:
    try:
        _ims(sim).exchange(promise_token)
    except NeedsReauthError:
        return True
    return False


def _credential_outcomes(stdout: str) -> list[str]:
    return sorted(
        dims["Outcome"]
        for _, dims in metric_values(emf_blobs(stdout), "CredentialOutcome")
        for _ in [0]
    )


def _assert_never_said(texts: list[str], tokens: list[str]) -> None:
    # redact_secret recognises a token raw, base64- and url-encoded (its canary tests).
    leaks = [
        (index, token[:6])
        for index, text in enumerate(texts)
        for token in tokens
        if redact_secret(text, token) != text
    ]
    assert leaks == []


# ---------------------------------------------------------------- exchange first


def test_ims_worker_exchanges_first_acts_as_the_user_and_ends_the_promise(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    exchanged: list[ExchangedTokens],
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, producer = ims_worker
    # Given a member of the child and its pool who asks for a top-up
    _seed(sim)
    access = sim.ims_user("u1", [MASTER, CHILD])
    request_id = producer.enqueue_ensure(
        CHILD, MASTER, {"projects": 0, "prompts": 230}, credential=UserCredential.access(access)
    )
    minted = stack.store().read(request_id, CHILD)
    assert minted is not None

    # When the worker handles it
    invocation = worker.invoke()

    # Then it was served (380 plus four blocks: 780, the used project refilled ahead to 5),
    # every Semrush call made as u1, one exchange, then the promise ended
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == (request_id, "topped-up")
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 5, "prompts": 780})]
    assert {call["user"] for call in api_calls(sim)} == {"u1"}
    assert [(c["op"], c["status"]) for c in sim.ims_calls()] == [
        ("ims_mint", 200),
        ("ims_exchange", 200),
        ("ims_invalidate", 200),
    ]
    assert _scrubbed(stack, request_id)
    [rolled] = exchanged
    assert _is_dead(sim, rolled.promise_token)  # the chain was invalidated
    stdout = capsys.readouterr().out
    assert _credential_outcomes(stdout) == ["exchanged"]
    _assert_never_said(
        [stdout, json.dumps(outcome)],
        [access, minted.promise_token, rolled.promise_token, rolled.access_token],
    )


def test_ims_worker_stores_the_rolled_token_before_it_transfers(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    promise = _u1_promise(sim)
    request_id = _ensure_with(producer, UserCredential.promise(promise))
    # Given a top-up, noting what the record holds when its transfer is sent
    held_at_transfer: list[str] = []
    original = SemrushClient.transfer

    def noting(self: SemrushClient, workspace_id: str, totals: Any, **kwargs: Any) -> None:
        stored = stack.store().read(request_id, CHILD)
        held_at_transfer.append(stored.promise_token if stored else "")
        original(self, workspace_id, totals, **kwargs)

    monkeypatch.setattr(SemrushClient, "transfer", noting)
    # When it is applied
    assert worker.invoke().failed == []
    # Then its roll was stored before anything was applied (it ran beside the reads)
    [held] = held_at_transfer
    assert held not in ("", promise)
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up"]
    assert _scrubbed(stack, request_id)


def test_ims_worker_stores_the_rolled_token_before_its_failed_record_comes_back(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    promise = _u1_promise(sim)
    request_id = _ensure_with(producer, UserCredential.promise(promise))
    # Given the request fails at its first Semrush call (the roll's store runs beside it)
    failed_calls: list[str] = []
    original = RequestTokenHolder.get_token

    def fail_once(self: RequestTokenHolder, *, refresh: bool = False) -> str:
        if not failed_calls:
            failed_calls.append(request_id)
            raise RuntimeError("the first call failed")
        return original(self, refresh=refresh)

    monkeypatch.setattr(RequestTokenHolder, "get_token", fail_once)

    # When the first receive fails the record and the message comes back
    first = worker.invoke()
    assert first.failed == first.message_ids
    assert outcome_capture.outcomes() == []
    stored = stack.store().read(request_id, CHILD)
    worker.redeliver_failed(first)
    second = worker.invoke()

    # Then the record came back holding the rolled token (its store was waited for), the old
    # one was dead, and the replay exchanged the rolled one and was served
    rolled = stored.promise_token if stored else ""
    assert rolled not in ("", promise)
    assert _is_dead(sim, promise)
    assert second.failed == []
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up"]
    assert [(c["op"], c["status"]) for c in sim.ims_calls()] == [
        ("ims_mint", 200),
        ("ims_exchange", 200),
        ("ims_exchange", 200),
        ("ims_invalidate", 200),
        ("ims_exchange", 401),  # this test's check that the original is dead
    ]
    assert _scrubbed(stack, request_id)


# ---------------------------------------------------------------- refusals


def _dlq_reasons(worker: AllocatorHarness) -> list[tuple[str, str]]:
    return [
        (m["Body"], m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"])
        for m in worker.drain_dlq()
    ]


def test_ims_worker_without_a_record_ends_no_credential_in_the_dlq(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, _ = ims_worker
    _seed(sim)
    # Given a request sent without a credential record (a producer without a store)
    request_id = AllocationProducer(local_resources.queue_url).enqueue_ensure(
        CHILD, MASTER, {"prompts": 230}
    )

    # When the worker handles it
    invocation = worker.invoke()

    # Then it completes failed/noCredential, dead-lettered with that reason, no call made
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"], outcome["dead_lettered"]) == (
        "failed",
        "noCredential",
        True,
    )
    [(body, reason)] = _dlq_reasons(worker)
    assert (json.loads(body)["request_id"], reason) == (request_id, "noCredential")
    assert api_calls(sim) == [] and sim.ims_calls() == []
    assert worker.receive() == []
    assert _credential_outcomes(capsys.readouterr().out) == ["noCredential"]


def test_ims_worker_with_a_dead_promise_ends_needs_reauth_in_the_dlq(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    access = sim.ims_user("u1", [MASTER, CHILD])
    request_id = _ensure_with(producer, UserCredential.access(access))
    # Given the promise was invalidated before the worker ran (expired, revoked)
    stored = stack.store().read(request_id, CHILD)
    assert stored is not None and _ims(sim).invalidate(stored.promise_token)

    invocation = worker.invoke()

    # Then failed/needsReauth, dead-lettered with that reason, no Semrush call, record scrubbed
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"], outcome["dead_lettered"]) == (
        "failed",
        "needsReauth",
        True,
    )
    dead_letters = worker.drain_dlq()
    assert [m["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] for m in dead_letters] == [
        "needsReauth"
    ]
    assert api_calls(sim) == []
    # The refused exchange, and no invalidation of a dead promise afterwards
    assert [(c["op"], c["status"]) for c in sim.ims_calls()] == [
        ("ims_mint", 200),
        ("ims_invalidate", 200),
        ("ims_exchange", 401),
    ]
    assert _scrubbed(stack, request_id)
    stdout = capsys.readouterr().out
    assert _credential_outcomes(stdout) == ["needsReauth"]
    _assert_never_said(
        [stdout, json.dumps(outcome), json.dumps(dead_letters, default=str)],
        [access, stored.promise_token],
    )


def test_ims_worker_needs_reauth_delivered_again_after_a_crash_before_the_delete_is_replayed(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    _seed(sim)
    ledger = DynamoDbRequestLedger(
        local_resources.ledger_table, local_client("dynamodb", local_resources.endpoint_url)
    )
    table = {"REQUEST_LEDGER_TABLE": local_resources.ledger_table}
    with _worker(local_resources, sim, stack, **table) as (worker, producer):
        access = sim.ims_user("u1", [MASTER, CHILD])
        request_id = _ensure_with(producer, UserCredential.access(access))
        stored = stack.store().read(request_id, CHILD)
        assert stored is not None and _ims(sim).invalidate(stored.promise_token)
        # Given its refusal was dead-lettered, stored, published and its record completed,
        # and the consumer died before the delete
        first = worker.die_before_the_delete()
        record = ledger.get(request_id)

        # When SQS delivers the same message again (its credential record scrubbed since)
        second = worker.invoke()
        record_after_replay = ledger.get(request_id)
        dead_letters = worker.drain_dlq()

        # And, the user's promise minted again, an operator redrives the DLQ copy (a new
        # message)
        again = _ims(sim).mint(access).promise_token
        assert stack.store().put(request_id, CHILD, again) is not None
        [dead_letter] = dead_letters
        worker.send_raw(dead_letter["Body"], group_id=CHILD, dedup_id="redrive-1")
        redrive = worker.invoke()

    # Then the redelivery replays the refusal: one outcome content, one DLQ copy, the ledger
    # record untouched (bound to the message that sent the dead letter)
    assert first.failed == second.failed == redrive.failed == []
    assert (second.message_ids, second.receive_counts()) == (first.message_ids, [2])
    [refused, replayed, redriven] = outcome_capture.outcomes()
    assert replayed == refused
    assert (refused["status"], refused["error_code"], refused["dead_lettered"]) == (
        "failed",
        "needsReauth",
        True,
    )
    assert dead_letter["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"] == "needsReauth"
    assert record is not None and record.source_message_id == first.message_ids[0]
    assert record_after_replay == record
    # And the redrive is applied, superseding the dead letter
    assert (redriven["status"], redriven["supersedes"]) == ("topped-up", "deadLettered")
    assert len(transfer_bodies(sim)) == 1
    final = ledger.get(request_id)
    assert final is not None and (final.state, final.source_message_id) == ("final", None)
    assert _is_dead(sim, again)


def test_ims_worker_non_member_ends_access_denied_nothing_applied(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    exchanged: list[ExchangedTokens],
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    # Given a user of the pool who is not a member of the child
    access = sim.ims_user("u2", [MASTER])
    request_id = _ensure_with(producer, UserCredential.access(access))

    invocation = worker.invoke()

    # Then rejected/accessDenied, never retried nor dead-lettered, nothing transferred
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"]) == ("rejected", "accessDenied")
    assert not outcome.get("dead_lettered")
    assert worker.drain_dlq() == []
    assert transfer_bodies(sim) == []
    assert [(c["op"], c["status"], c["user"]) for c in api_calls(sim)] == [
        ("read_resources", 403, "u2")
    ]
    assert [c["op"] for c in sim.ims_calls()] == ["ims_mint", "ims_exchange", "ims_invalidate"]
    assert _scrubbed(stack, request_id)
    stdout = capsys.readouterr().out
    assert _credential_outcomes(stdout) == ["accessDenied", "exchanged"]
    [rolled] = exchanged
    _assert_never_said(
        [stdout, json.dumps(outcome)], [access, rolled.access_token, rolled.promise_token]
    )


class _TickingClock:
    """Monotonic seconds that jump 10 s at every read once ticking (access tokens of 1 s)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.ticking = False

    def __call__(self) -> float:
        if self.ticking:
            self.now += 10.0
        return self.now


def test_ims_worker_401_storm_with_fresh_tokens_comes_back_with_its_token(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    request_id = _ensure_with(producer, UserCredential.promise(_u1_promise(sim)))
    # Given a short Semrush 401 storm: the read and its retry after a fresh exchange refused
    sim.faults(fail_next=[{"op": "read_resources", "status": 401, "count": 2}])

    first = worker.invoke()

    # Then the record comes back (no outcome, nothing dead-lettered), its promise kept: the
    # rolled token on the record, nothing invalidated, counted ``unauthorized`` (alarmed)
    assert first.failed == first.message_ids and outcome_capture.outcomes() == []
    assert [(c["op"], c["status"]) for c in api_calls(sim)] == [
        ("read_resources", 401),
        ("read_resources", 401),
    ]
    assert [c["op"] for c in sim.ims_calls()] == ["ims_mint", "ims_exchange", "ims_exchange"]
    assert not _scrubbed(stack, request_id)
    assert "unauthorized" in _credential_outcomes(capsys.readouterr().out)
    # When the storm is over and the record comes back
    worker.redeliver_failed(first)
    second = worker.invoke()

    # Then the same user's request is served with the token the first receive rolled
    assert second.failed == []
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "topped-up"
    assert worker.drain_dlq() == []
    assert _scrubbed(stack, request_id)


# ---------------------------------------------------------------- coalescing


def test_ims_worker_coalesced_run_admits_only_members_whose_user_reads_the_child(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    members = {"u1": [MASTER, CHILD], "u2": [MASTER], "u3": [MASTER, CHILD]}
    ids = {
        user: producer.enqueue_ensure(
            CHILD,
            MASTER,
            {"prompts": 100},
            credential=UserCredential.access(sim.ims_user(user, workspaces)),
        )
        for user, workspaces in members.items()
    }

    # When one batch carries the three ensures (one run: u1 leads)
    invocation = worker.invoke()

    # Then u2 ended accessDenied alone; u1 and u3 were served by one transfer sized for them
    assert len(invocation.message_ids) == 3 and invocation.failed == []
    by_id = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert (by_id[ids["u2"]]["status"], by_id[ids["u2"]]["error_code"]) == (
        "rejected",
        "accessDenied",
    )
    assert [(by_id[ids[u]]["status"], by_id[ids[u]]["coalesced"]) for u in ("u1", "u3")] == [
        ("topped-up", 2),
        ("topped-up", 2),
    ]
    # 150 used + 100 + 100 = 350, plus four blocks (more than the 200 asked): 750, the used
    # project refilled ahead to 1 + 4 = 5 (u2's 100 more would have made it 450 + 400 = 850)
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 5, "prompts": 750})]
    transfers = api_calls(sim, "transfer")
    assert [call["user"] for call in transfers] == ["u1"]
    assert [(c["op"], c["status"]) for c in api_calls(sim) if c["user"] == "u2"] == [
        ("read_resources", 403)
    ]
    assert totals_of(sim)[CHILD] == (5, 750)
    assert all(_scrubbed(stack, request_id) for request_id in ids.values())
    invalidated = [c["user"] for c in sim.ims_calls() if c["op"] == "ims_invalidate"]
    assert sorted(invalidated) == ["u1", "u2", "u3"]


def test_ims_worker_one_users_burst_on_one_child_is_admitted_by_one_read(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    access = sim.ims_user("u1", [MASTER, CHILD])
    ids = [
        producer.enqueue_ensure(
            CHILD, MASTER, {"prompts": 100}, credential=UserCredential.access(access)
        )
        for _ in range(4)
    ]

    # When one batch carries the user's four ensures (one run)
    invocation = worker.invoke()

    # Then the leader's own read admitted them all (IMS's token names one user): one read of
    # the child, one transfer sized for the four, every call u1's
    assert invocation.failed == []
    outcomes = outcome_capture.outcomes()
    assert sorted(o["request_id"] for o in outcomes) == sorted(ids)
    assert {(o["status"], o["coalesced"]) for o in outcomes} == {("topped-up", 4)}
    child_reads = [c for c in api_calls(sim, "read_resources") if c["workspace_id"] == CHILD]
    assert len(child_reads) == 1
    assert {c["user"] for c in api_calls(sim)} == {"u1"}
    assert [c["op"] for c in sim.ims_calls()].count("ims_exchange") == 4
    assert all(_scrubbed(stack, request_id) for request_id in ids)


# ---------------------------------------------------------------- IMS faults


@pytest.mark.parametrize(
    "faults",
    [
        {"fail_next": [{"op": "ims_exchange", "status": 429, "count": 3}]},
        {"fail_next": [{"op": "ims_exchange", "status": 503, "count": 3}]},
        {"error_rate": {"timeout": 1.0}, "timeout_hold_ms": 1},
    ],
    ids=["429", "503", "timeout"],
)
def test_ims_worker_ims_faults_are_transient_and_keep_the_token(
    faults: dict[str, Any],
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    promise = _u1_promise(sim)
    request_id = _ensure_with(producer, UserCredential.promise(promise))
    # Given IMS failing every exchange attempt of this receive
    sim.faults(**faults)

    first = worker.invoke()

    # Then the record failed (it comes back), after the upstream client's 1 s and 2 s pauses,
    # no Semrush call, no outcome, and the record still holds the unspent token
    assert first.failed == first.message_ids
    assert worker.sleeps.calls == [1.0, 2.0]
    assert api_calls(sim) == [] and outcome_capture.outcomes() == []
    stored = stack.store().read(request_id, CHILD)
    assert stored is not None and stored.promise_token == promise
    assert _credential_outcomes(capsys.readouterr().out) == ["imsUnavailable"]

    # When IMS recovers and the message comes back
    sim.faults(error_rate={}, fail_next=[])
    worker.redeliver_failed(first)
    second = worker.invoke()

    # Then it is served as the user
    assert second.failed == []
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up"]
    assert _scrubbed(stack, request_id)


def test_ims_worker_ims_down_on_the_final_receive_ends_ims_unavailable(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    _seed(sim)
    with _worker(local_resources, sim, stack, MAX_RECEIVE_COUNT="1") as (worker, producer):
        promise = _u1_promise(sim)
        request_id = _ensure_with(producer, UserCredential.promise(promise))
        sim.faults(fail_next=[{"op": "ims_exchange", "status": 503, "count": 3}])

        invocation = worker.invoke()

    # Then the final receive ended it failed/imsUnavailable (SQS moves it to the DLQ next),
    # and the unspent promise was invalidated and scrubbed all the same
    assert invocation.failed == invocation.message_ids
    [outcome] = outcome_capture.outcomes()
    assert (outcome["status"], outcome["error_code"], outcome["dead_lettered"]) == (
        "failed",
        "imsUnavailable",
        True,
    )
    assert _scrubbed(stack, request_id)
    assert _is_dead(sim, promise)


# ---------------------------------------------------------------- every terminal path ends it


def test_ims_worker_replay_of_a_final_request_ends_a_token_written_again(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    _seed(sim)
    ledger = {"REQUEST_LEDGER_TABLE": local_resources.ledger_table}
    with _worker(local_resources, sim, stack, **ledger) as (worker, producer):
        access = sim.ims_user("u1", [MASTER, CHILD])
        request_id = _ensure_with(producer, UserCredential.access(access))
        [message] = worker.receive()
        worker.handle([message])
        # Given the request is final and a retried enqueue wrote a fresh promise for it
        again = _ims(sim).mint(access).promise_token
        assert stack.store().put(request_id, CHILD, again) is not None
        worker.send_raw(message["Body"], group_id=CHILD, dedup_id="a-later-copy")

        # When the copy is delivered
        invocation = worker.invoke()

    # Then it is replayed (nothing applied again) and the fresh promise is ended too
    assert invocation.failed == []
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up", "topped-up"]
    assert len(transfer_bodies(sim)) == 1
    assert _scrubbed(stack, request_id)
    assert _is_dead(sim, again)


def test_ims_worker_invalid_message_naming_another_requests_id_leaves_its_record(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    worker, _ = ims_worker
    _seed(sim)
    # Given a request's live record (its message not yet delivered)
    promise = _u1_promise(sim)
    assert stack.store().put("r-victim-1", CHILD, promise) is not None
    body = {
        "version": 1,
        "kind": "ensure",
        "request_id": "r-victim-1",
        "workspace_id": CHILD,
        "parent_workspace_id": MASTER,
        "need": {"projects": 0, "prompts": 5},
    }
    # When a message in the wrong group names its id (invalid, the id readable)
    worker.send_raw(json.dumps(body), group_id="another-group", dedup_id="d-1")

    invocation = worker.invoke()

    # Then the invalid message is dead-lettered, and the named request's record and promise
    # are untouched (nothing proves the record is this message's)
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == ("r-victim-1", "invalid")
    stored = stack.store().read("r-victim-1", CHILD)
    assert stored is not None and stored.promise_token == promise
    assert api_calls(sim) == []
    assert [c["op"] for c in sim.ims_calls() if c["op"] != "ims_mint"] == []
    assert not _is_dead(sim, promise)


def _rewrite_record(stack: CredentialsStack, request_id: str, **attributes: Any) -> None:
    item = stack.raw_item(request_id)
    assert item is not None
    stack.dynamodb.put_item(TableName=stack.table_name, Item={**item, **attributes})


def _log_lines(stdout: str, message: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == message]


def test_ims_worker_record_it_cannot_read_ends_at_once_with_its_own_code_and_is_scrubbed(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, producer = ims_worker
    _seed(sim)
    logs = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", logs)
    # Given a request whose record holds its ciphertext base64-encoded once more (what an
    # AWS CLI v1 recipe writes), behind a request of the same child with a good record
    good = _ensure_with(producer, UserCredential(promise_token=_u1_promise(sim)))
    bad = _ensure_with(producer, UserCredential(promise_token=_u1_promise(sim)))
    item = stack.raw_item(bad)
    assert item is not None
    _rewrite_record(
        stack, bad, promise_token={"B": base64.b64encode(bytes(item["promise_token"]["B"]))}
    )

    # When the worker handles the batch (both on their first receive)
    invocation = worker.invoke()

    # Then the unreadable one ends at once: failed/credentialUnreadable, dead-lettered with
    # that reason, its record scrubbed, nothing exchanged for it; the good one is applied
    assert invocation.failed == []
    outcomes = {o["request_id"]: o for o in outcome_capture.outcomes()}
    assert (outcomes[good]["status"], outcomes[good].get("error_code")) == ("topped-up", None)
    fields = ("status", "error_code", "dead_lettered", "receive_count")
    assert [outcomes[bad][key] for key in fields] == ["failed", "credentialUnreadable", True, 1]
    [(body, reason)] = _dlq_reasons(worker)
    assert (json.loads(body)["request_id"], reason) == (bad, "credentialUnreadable")
    assert _scrubbed(stack, bad)
    assert len([c for c in sim.ims_calls() if c["op"] == "ims_exchange"]) == 1
    # And its log line names that record, not the one before it
    [line] = [
        line
        for line in _log_lines(logs.getvalue(), "allocation outcome")
        if line["request_id"] == bad
    ]
    assert (line["workspace_id"], line["receive_count"], line["error_code"]) == (
        CHILD,
        1,
        "credentialUnreadable",
    )
    assert worker.receive() == []


def test_ims_worker_refuses_a_record_written_for_another_child_and_leaves_it_alone(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    worker, _ = ims_worker
    _seed(sim)
    # Given another child's live record under a request id (the victim's message not yet
    # delivered), and a message of this child reusing that id
    promise = _u1_promise(sim)
    assert stack.store().put("r-reused-1", "ws-child-other", promise) is not None
    body = {
        "version": 1,
        "kind": "ensure",
        "request_id": "r-reused-1",
        "workspace_id": CHILD,
        "parent_workspace_id": MASTER,
        "need": {"projects": 0, "prompts": 5},
    }
    worker.send_raw(json.dumps(body), group_id=CHILD, dedup_id="d-reused-1")

    # When the worker handles it
    invocation = worker.invoke()

    # Then it is refused as a request id conflict at once (not noCredential, not retried),
    # nothing applied or stored under the id, and the other child's record and promise stay
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"], outcome["error_code"]) == (
        "r-reused-1",
        "rejected",
        "requestIdConflict",
    )
    assert worker.drain_dlq() == []
    assert api_calls(sim) == []
    assert [c["op"] for c in sim.ims_calls() if c["op"] != "ims_mint"] == []
    stored = stack.store().read("r-reused-1", "ws-child-other")
    assert stored is not None and stored.promise_token == promise
    assert not _is_dead(sim, promise)
    assert worker.receive() == []


# ---------------------------------------------------------------- the consumer pair's secret


def test_ims_worker_reads_the_consumer_pair_from_secrets_manager(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    # Given the consumer pair only in a Secrets Manager secret
    name = _consumer_secret(local_resources, json.dumps(sim.ims_clients()["consumer"]))
    _seed(sim)
    from_secret = {
        "IMS_CONSUMER_CLIENT_ID": None,
        "IMS_CONSUMER_CLIENT_SECRET": None,
        "IMS_CONSUMER_SECRET_ID": name,
    }
    with _worker(local_resources, sim, stack, **from_secret) as (worker, producer):
        access = sim.ims_user("u1", [MASTER, CHILD])
        _ensure_with(producer, UserCredential.access(access))
        invocation = worker.invoke()

    # Then the worker exchanged with that pair and served the request
    assert invocation.failed == []
    assert [o["status"] for o in outcome_capture.outcomes()] == ["topped-up"]
    assert [c["client_id"] for c in sim.ims_calls() if c["op"] != "ims_mint"] == [
        "sim-consumer",
        "sim-consumer",
    ]


@pytest.mark.parametrize(
    "secret",
    [
        '{"client_id": "c"}',
        "not-json sim-consumer-secret",
        '{"client_id": " ", "client_secret": "x"}',
    ],
)
def test_ims_worker_refuses_a_malformed_consumer_secret_without_quoting_it(
    secret: str, local_resources: LocalResources, sim: SimulatorServer, stack: CredentialsStack
) -> None:
    name = _consumer_secret(local_resources, secret)
    env = {**_ims_env(sim, stack), "IMS_CONSUMER_CLIENT_ID": None}
    env.update(IMS_CONSUMER_CLIENT_SECRET=None, IMS_CONSUMER_SECRET_ID=name)
    with pytest.raises(ImsPairSecretError) as raised, allocator_harness(local_resources, sim, env):
        pass
    assert "IMS consumer secret" in str(raised.value)
    assert secret not in str(raised.value) and "sim-consumer-secret" not in str(raised.value)


# ---------------------------------------------------------------- releases and the kill switch


def test_ims_worker_release_runs_as_its_user(
    ims_worker: tuple[AllocatorHarness, AllocationProducer],
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    worker, producer = ims_worker
    _seed(sim, child_prompts=(50, 500))
    access = sim.ims_user("u1", [MASTER, CHILD])
    request_id = producer.enqueue_release(CHILD, credential=UserCredential.access(access))

    invocation = worker.invoke()

    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert (outcome["request_id"], outcome["status"]) == (request_id, "released")
    assert transfer_bodies(sim) == [(CHILD, 200, {"projects": 1, "prompts": 100})]
    assert {call["user"] for call in api_calls(sim)} == {"u1"}
    assert _scrubbed(stack, request_id)


def test_ims_worker_with_the_kill_switch_off_exchanges_nothing_and_ends_the_promise(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
) -> None:
    _seed(sim)
    off = {"SERENITY_DYNAMIC_ALLOCATION": "false"}
    with _worker(local_resources, sim, stack, **off) as (worker, producer):
        promise = _u1_promise(sim)
        request_id = _ensure_with(producer, UserCredential.promise(promise))
        invocation = worker.invoke()

    # Then disabled, no Semrush call, no exchange, and the unused promise invalidated, scrubbed
    assert invocation.failed == []
    assert [o["status"] for o in outcome_capture.outcomes()] == ["disabled"]
    assert api_calls(sim) == []
    assert [c["op"] for c in sim.ims_calls()] == ["ims_mint", "ims_invalidate"]
    assert _scrubbed(stack, request_id)


# ---------------------------------------------------------------- a roll that cannot be stored


def test_ims_worker_roll_throttled_in_every_attempt_goes_on_and_ends_the_chain(
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given DynamoDB throttling every store of a rolled token (UpdateItem with rolled_at)
    answer, answered = throttled("DynamoDB_20120810.UpdateItem", body_contains="rolled_at")
    with slow_proxy(local_resources.endpoint_url, 0.0, never, answer) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)
        _seed(sim)
        promise = _u1_promise(sim)
        with _worker(local_resources, sim, stack) as (worker, producer):
            request_id = _ensure_with(producer, UserCredential.promise(promise))

            invocation = worker.invoke()

    # Then the request was served on the access token in hand (not failed, not needsReauth
    # at a next receive): every store tried (two attempts of two calls), the chain ended at
    # its terminal state by invalidating the rolled token, the record scrubbed
    assert invocation.failed == []
    [outcome] = outcome_capture.outcomes()
    assert outcome["status"] == "topped-up"
    assert len(answered) == 4
    assert [c["op"] for c in sim.ims_calls()] == ["ims_mint", "ims_exchange", "ims_invalidate"]
    assert _scrubbed(stack, request_id)
    assert _is_dead(sim, promise)


# ---------------------------------------------------------------- a refused consumer pair


def _refused_pair_env(local_resources: LocalResources, sim: SimulatorServer) -> tuple[str, dict]:
    """A consumer secret holding the right id with a wrong (rotated) secret, and its env."""
    consumer = sim.ims_clients()["consumer"]
    wrong = json.dumps({"client_id": consumer["client_id"], "client_secret": "rotated-away"})
    name = _consumer_secret(local_resources, wrong)
    env = {
        "IMS_CONSUMER_CLIENT_ID": None,
        "IMS_CONSUMER_CLIENT_SECRET": None,
        "IMS_CONSUMER_SECRET_ID": name,
    }
    return name, env


def _fix_pair(local_resources: LocalResources, sim: SimulatorServer, name: str) -> None:
    secrets = local_client("secretsmanager", local_resources.endpoint_url)
    put_secret(secrets, name, json.dumps(sim.ims_clients()["consumer"]))


def _alarm_fires(stdout: str) -> bool:
    """The template's ImsClientRefusedAlarm over this output's EMF: Sum > Threshold (0)."""
    refused = [
        value
        for value, dims in metric_values(emf_blobs(stdout), "CredentialOutcome")
        if dims["Outcome"] == "imsClientRefused"
    ]
    return sum(refused) > 0


@pytest.mark.parametrize("container", ["warm", "cold"])
def test_ims_worker_with_a_refused_consumer_pair_keeps_every_promise_then_serves_after_the_fix(
    container: str,
    local_resources: LocalResources,
    sim: SimulatorServer,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a deployment whose consumer secret was rotated at IMS and not here, and two users'
    # requests, each on a child of their own
    children = {"u1": CHILD, "u2": OTHER_CHILD}
    sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 10_000)),
            *(
                workspace(child, parent_id=MASTER, projects=(1, 1), prompts=(150, 200))
                for child in children.values()
            ),
        ]
    )
    name, env = _refused_pair_env(local_resources, sim)
    promises = {
        user: _ims(sim).mint(sim.ims_user(user, [MASTER, child])).promise_token
        for user, child in children.items()
    }
    with _worker(local_resources, sim, stack, **env) as (worker, producer):
        ids = {
            user: producer.enqueue_ensure(
                children[user], MASTER, {"prompts": 230}, credential=UserCredential.promise(promise)
            )
            for user, promise in promises.items()
        }

        # When every receive runs with the bad pair, up to the final one
        receives = local_resources.max_receive_count
        invocations = worker.redeliver_each(receives)

        # Then no request was sent to sign in again: each came back with its promise, and the
        # final receive ended it failed/imsClientRefused, answered as our configuration fault
        assert all(i.failed == i.message_ids for i in invocations)
        outcomes = outcome_capture.outcomes()
        assert sorted((o["request_id"], o["status"], o["error_code"]) for o in outcomes) == sorted(
            (request_id, "failed", "imsClientRefused") for request_id in ids.values()
        )
        # And every promise is kept: on its record, never invalidated, still exchangeable
        store = stack.store()
        for user, request_id in ids.items():
            stored = store.read(request_id, children[user])
            assert stored is not None and stored.promise_token == promises[user]
        assert {c["op"] for c in sim.ims_calls()} == {"ims_mint", "ims_exchange"}
        assert {c["status"] for c in sim.ims_calls() if c["op"] == "ims_exchange"} == {401}
        assert api_calls(sim) == []
        stdout = capsys.readouterr().out
        assert "needsReauth" not in _credential_outcomes(stdout)
        assert _credential_outcomes(stdout) == ["imsClientRefused"] * (2 * receives)
        assert _alarm_fires(stdout)  # the template's alarm: any in a minute pages
        # And the redrive policy moves both to the DLQ
        assert worker.receive() == []
        dead = worker.drain_dlq()
        assert sorted(json.loads(m["Body"])["request_id"] for m in dead) == sorted(ids.values())

        # When the pair is fixed in its secret and the letters are redriven
        _fix_pair(local_resources, sim, name)
        for message in dead:
            body = json.loads(message["Body"])
            worker.send_raw(
                message["Body"],
                group_id=body["workspace_id"],
                dedup_id=f"redrive-{body['request_id']}",
            )
        if container == "warm":
            # the same container: it reads the pair again because IMS refused it
            redriven = worker.invoke()
        else:
            with _worker(local_resources, sim, stack, **env) as (cold, _):
                redriven = cold.invoke()

    # Then both run with their kept promises and are served
    assert redriven.failed == []
    served = [o for o in outcome_capture.outcomes() if o["status"] == "topped-up"]
    assert sorted(o["request_id"] for o in served) == sorted(ids.values())
    exchanges = [c for c in sim.ims_calls() if c["op"] == "ims_exchange"]
    assert [c["status"] for c in exchanges][-2:] == [200, 200]
    assert {c["user"] for c in api_calls(sim)} == {"u1", "u2"}
    assert all(_scrubbed(stack, request_id) for request_id in ids.values())


# ---------------------------------------------------------------- the Semrush pair's scope


def test_ims_worker_with_a_pair_without_the_semrush_scope_says_so_apart_from_a_non_member(
    local_resources: LocalResources,
    stack: CredentialsStack,
    outcome_capture: OutcomeCapture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given IMS with the deployment's Semrush pair and a general pair whose promise definition
    # lacks the scope, and a worker wrongly given the general consumer pair
    general = (
        SimulatorPair("gen-emitter", "gen-secret", "gen-definition", semrush_scope=False),
        SimulatorPair("gen-consumer", "gen-consumer-secret", semrush_scope=False),
    )
    config = ImsConfig(other_pairs=(general,))
    with start_simulator(ims_config=config) as ims_sim:
        _seed(ims_sim)
        wrong_pair = {
            "IMS_CONSUMER_CLIENT_ID": "gen-consumer",
            "IMS_CONSUMER_CLIENT_SECRET": "gen-consumer-secret",
        }
        promise = _u1_promise(ims_sim)  # u1 is a member of the child and its pool
        with _worker(local_resources, ims_sim, stack, **wrong_pair) as (worker, producer):
            request_id = _ensure_with(producer, UserCredential.promise(promise))

            # When the worker handles the member's request
            invocation = worker.invoke()

        # Then it is not read as a non-member: it fails for now (it comes back), no Semrush
        # call made, counted semrushScopeMissing (paged), the ROLLED promise kept on its record
        assert invocation.failed == invocation.message_ids
        assert outcome_capture.outcomes() == []
        assert api_calls(ims_sim) == []
        stored = stack.store().read(request_id, CHILD)
        assert stored is not None and stored.promise_token != promise
        assert _is_dead(ims_sim, promise)  # spent by that exchange: only the roll lives on
        stdout = capsys.readouterr().out
        assert _credential_outcomes(stdout) == ["semrushScopeMissing"]
        assert "accessDenied" not in stdout

        # When the pair is fixed (the Semrush pair) and the record comes back
        worker.redeliver_failed(invocation)
        with _worker(local_resources, ims_sim, stack) as (fixed, producer):
            # beside it, a user who really is not a member of the child
            stranger = producer.enqueue_ensure(
                OTHER_CHILD,
                MASTER,
                {"prompts": 10},
                credential=UserCredential.access(ims_sim.ims_user("u9", [MASTER])),
            )
            served = fixed.invoke()

        # Then the member's request is served with its kept promise, and the non-member's ends
        # accessDenied: the two are told apart
        assert served.failed == []
        by_id = {
            o["request_id"]: (o["status"], o.get("error_code")) for o in outcome_capture.outcomes()
        }
        assert by_id == {request_id: ("topped-up", None), stranger: ("rejected", "accessDenied")}
        stdout = capsys.readouterr().out
        assert sorted(_credential_outcomes(stdout)) == ["accessDenied", "exchanged", "exchanged"]
