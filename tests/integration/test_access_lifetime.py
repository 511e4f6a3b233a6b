"""Exchanged access tokens live about five minutes: a batch and a Sweep that outlive one.

IMS's exchanged token lives ``expires_in`` seconds (299 in the published clients' fixtures,
ims-promise-tokens.md). The simulator gives it 300 s here and time passes on an injected clock
shared by the simulator and the function: every Semrush call takes 10 s of it (less than the
client's 15 s timeout, the margin a holder keeps), so no test waits. A batch or a run that
lasts longer than one token must never present a dead one: no Semrush 401, no IMS refusal, 0
``needsReauth``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serenity_allocator.adapters.credential_store import KmsTokenCipher
from serenity_allocator.adapters.ims_client import ImsClient, ImsClientPair
from serenity_allocator.adapters.request_authority import CredentialHandover, UserCredential
from serenity_allocator.adapters.s3_checkpoint_store import S3CheckpointStore
from serenity_allocator.application.sweep.run_tokens import hand_over_run_token
from serenity_allocator.producer import AllocationProducer
from serenity_tools.standins.moto_server import MotoServer
from serenity_tools.standins.resources import LocalResources
from serenity_tools.standins.simulator import (
    ImsConfig,
    SimulatorServer,
    SimulatorState,
    start_simulator,
)
from tests.conftest import OutcomeCapture
from tests.fakes import FakeClock
from tests.integration.allocator_harness import allocator_harness, api_calls, workspace
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack
from tests.integration.sweep_ims_stack import OPERATOR, ims_sweep_stack
from tests.integration.sweep_stack import payload

EXCHANGED_TTL_S = 300.0
SEMRUSH_CALL_S = 10.0
MASTER = "ws-master"
CHILDREN = [f"ws-child-{n}" for n in range(10)]
RUN_ID = "rs-lifetime-1"


class SlowSemrush(SimulatorState):
    """The simulator whose every Semrush API call takes ``SEMRUSH_CALL_S`` of the clock.

    ``opens_first``: the first call waits (in real time, bounded) until that many exchanges
    were answered, so every session opened ahead is exchanged at the clock's start (the
    worker's first request reads while the other opens are still under way).
    """

    opens_first = 0

    def handle_api(self, *args: Any, **kwargs: Any) -> Any:
        assert isinstance(self.clock, FakeClock)
        deadline = time.monotonic() + 10.0
        while self._exchanges() < self.opens_first and time.monotonic() < deadline:
            time.sleep(0.01)
        self.clock.advance(SEMRUSH_CALL_S)  # the call arrives once its time has passed
        return super().handle_api(*args, **kwargs)

    def _exchanges(self) -> int:
        return sum(1 for c in self.ims.calls() if c.get("op") == "ims_exchange")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def slow_sim(clock: FakeClock) -> Iterator[SimulatorServer]:
    state = SlowSemrush(
        clock=clock,
        sleep=clock.sleep,
        ims_config=ImsConfig(exchanged_ttl_s=EXCHANGED_TTL_S),
    )
    with start_simulator(state=state) as server:
        yield server


pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


@pytest.fixture
def stack(aws_env: Any) -> CredentialsStack:
    return create_credentials_stack(aws_env)


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


def test_a_batch_longer_than_an_access_token_never_presents_a_dead_one(
    local_resources: LocalResources,
    slow_sim: SimulatorServer,
    stack: CredentialsStack,
    clock: FakeClock,
    outcome_capture: OutcomeCapture,
) -> None:
    # Given ten top-ups on ten children of one pool, asked by one member of them all
    slow_sim.seed(
        [
            workspace(MASTER, projects=(0, 100), prompts=(0, 100_000)),
            *(
                workspace(child, parent_id=MASTER, projects=(1, 1), prompts=(150, 200))
                for child in CHILDREN
            ),
        ]
    )
    access = slow_sim.ims_user("u1", [MASTER, *CHILDREN])
    producer = AllocationProducer(
        local_resources.queue_url, credentials=CredentialHandover(stack.store(), _ims(slow_sim))
    )
    ids = [
        producer.enqueue_ensure(
            child, MASTER, {"prompts": 230}, credential=UserCredential.access(access)
        )
        for child in CHILDREN
    ]

    slow_sim.state.opens_first = len(ids)  # type: ignore[attr-defined]
    with allocator_harness(local_resources, slow_sim, _ims_env(slow_sim, stack)) as worker:
        worker.runtime.clock = clock
        started = clock()
        # When one batch carries all ten (a function long enough to outlive a token)
        messages = worker.receive()
        assert len(messages) == 10
        _event, response = worker.run_handler(messages, timeout_s=3600.0, clock=clock)

    # Then the batch outlived one access token...
    assert clock() - started > EXCHANGED_TTL_S
    # ...yet every request was served, no Semrush call was refused for its token, and IMS
    # refused nothing: the tokens were exchanged again before they would have died
    assert response == {"batchItemFailures": []}
    outcomes = {o["request_id"]: o["status"] for o in outcome_capture.outcomes()}
    assert outcomes == dict.fromkeys(ids, "topped-up")
    assert [c for c in api_calls(slow_sim) if c["status"] == 401] == []
    assert {c["user"] for c in api_calls(slow_sim)} == {"u1"}
    ims_calls = slow_sim.ims_calls()
    assert [c for c in ims_calls if c["status"] != 200] == []
    exchanges = [c for c in ims_calls if c["op"] == "ims_exchange"]
    # the ten opens at the start, and one re-exchange: the last request's calls, from 280 s on,
    # would not have ended inside its token's 300 s
    assert (len(exchanges), clock() - started) == (len(ids) + 1, 310.0)


def test_a_sweep_batch_longer_than_an_access_token_mints_every_release_from_a_live_one(
    local_resources: LocalResources,
    slow_sim: SimulatorServer,
    aws_env: MotoServer,
    clock: FakeClock,
) -> None:
    # Given a real run over five children, a minute's pause between targets (the Sweep's
    # rate limit, on the function's clock): its one batch outlives an access token
    with ims_sweep_stack(local_resources, slow_sim, aws_env) as ims:
        ims.stack.runtime.clock = clock
        ims.stack.runtime.sleep = clock.sleep
        store = S3CheckpointStore(ims.stack.resources.bucket)
        hand_over_run_token(store, KmsTokenCipher(ims.key_id), RUN_ID, ims.mint())
        started = clock()

        # When it goes through
        [result] = ims.stack.run_to_end(payload(run_id=RUN_ID, dry_run=False, rate_limit_ms=60_000))

        # Then the batch lasted longer than one access token...
        assert clock() - started > EXCHANGED_TTL_S
        # ...and every release was minted from a live token of the operator: IMS refused
        # no mint (a dead authenticating_token would be a 401), Semrush no call
        assert (result["done"], result["counts"]["enqueued"]) == (True, 3)
        ims_calls = slow_sim.ims_calls()
        assert [c for c in ims_calls if c["status"] != 200] == []
        mints = [c for c in ims_calls if c["op"] == "ims_mint"]
        assert [(c["status"], c["user"]) for c in mints] == [(200, OPERATOR)] * 4
        assert [c for c in api_calls(slow_sim) if c["status"] == 401] == []
        # And the run's token was exchanged again inside the batch, each roll stored in turn
        assert (len(ims.ims.exchanged), clock() - started) == (2, 340.0)
        assert ims.ims.exchanged[1:] == ims.ims.rolled[:-1]
        # And each release's record holds a live promise the worker can exchange
        credentials = ims.credentials.store()
        for message in ims.stack.queued():
            body = json.loads(message["Body"])
            stored = credentials.read(body["request_id"], body["workspace_id"])
            assert stored is not None
            with ims.consumer() as consumer:
                assert consumer.exchange(stored.promise_token).access_token
