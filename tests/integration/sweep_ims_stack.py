"""The sweep in IMS mode on real HTTP: the simulator's IMS and Semrush, moto's S3, SQS and KMS.

The runtime is production's (``build_sweep_runtime`` from an IMS-mode environment: the session
token holder, the consumer pair, the KMS cipher, the S3 claim store); only sleeps are recorded
instead of slept, and the IMS client is wrapped in a spy that notes which tokens went in and
came out (the calls themselves are the real client's, over HTTP).
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from serenity_allocator.adapters.credential_store import KmsTokenCipher
from serenity_allocator.adapters.ims_client import (
    ExchangedTokens,
    ImsClient,
    ImsClientConfig,
    ImsClientPair,
)
from serenity_allocator.adapters.semrush import SemrushClient, SemrushClientConfig
from serenity_allocator.domain.sweep.run_claim import run_token_context
from serenity_allocator.handlers.settings import SweepSettings
from serenity_allocator.handlers.sweep import lambda_handler
from serenity_allocator.handlers.sweep_runtime import build_sweep_runtime
from serenity_tools.operator import sweep_cli
from serenity_tools.operator.sweep_invokers import LocalInvoker
from serenity_tools.standins.moto_server import MotoServer
from serenity_tools.standins.resources import LocalResources, local_client
from serenity_tools.standins.simulator import SimulatorServer
from tests.integration.allocator_harness import RecordingSleep, no_jitter
from tests.integration.credentials_stack import CredentialsStack, create_credentials_stack
from tests.integration.sweep_stack import (
    CHILDREN,
    ENVIRONMENT,
    MASTER,
    SweepStack,
    WallClock,
    seed_fleet,
)

OPERATOR = "operator-1"


class ImsSpy:
    """The real IMS client, noting every token exchanged, rolled and invalidated."""

    def __init__(self, client: ImsClient) -> None:
        self.client = client
        self.exchanged: list[str] = []
        self.rolled: list[str] = []
        self.access: list[str] = []
        self.invalidated: list[str] = []

    def exchange(self, promise_token: str) -> ExchangedTokens:
        self.exchanged.append(promise_token)
        answer = self.client.exchange(promise_token)
        self.rolled.append(answer.promise_token)
        self.access.append(answer.access_token)
        return answer

    def invalidate(self, promise_token: str) -> bool:
        self.invalidated.append(promise_token)
        return self.client.invalidate(promise_token)

    def limit_time(self, seconds: float | None) -> None:
        self.client.limit_time(seconds)

    def every_token(self) -> list[str]:
        return [*self.exchanged, *self.rolled, *self.access]


@dataclass
class ImsSweepStack:
    """The sweep stack plus its IMS and KMS sides."""

    stack: SweepStack
    ims: ImsSpy
    key_id: str
    kms: Any
    env: dict[str, str]
    operator_access: str
    ims_sleeps: RecordingSleep
    credentials: CredentialsStack
    handed: list[str] = field(default_factory=list)

    @property
    def sim(self) -> SimulatorServer:
        return self.stack.sim

    def claim(self, run_id: str) -> dict[str, Any] | None:
        """The run's claim document as stored (ciphertext only)."""
        try:
            body = self.stack.s3.get_object(
                Bucket=self.stack.resources.bucket, Key=f"sweep/runs/{run_id}.json"
            )["Body"].read()
        except self.stack.s3.exceptions.NoSuchKey:
            return None
        document: dict[str, Any] = json.loads(body)
        return document

    def claim_token(self, run_id: str) -> str:
        """The plain promise token on the claim (the test decrypts what the Sweep would)."""
        claim = self.claim(run_id)
        assert claim is not None and claim["promise_token"] is not None
        ciphertext = base64.b64decode(claim["promise_token"])
        plain = self.kms.decrypt(
            CiphertextBlob=ciphertext, EncryptionContext=run_token_context(run_id)
        )["Plaintext"]
        return bytes(plain).decode("utf-8")

    def mint(self, access_token: str | None = None) -> str:
        """A promise token of the operator, minted with the emitter pair."""
        clients = self.sim.ims_clients()
        with ImsClient(
            self.sim.origin,
            emitter=ImsClientPair(**clients["emitter"]),
            http=httpx.Client(trust_env=False),
        ) as emitter:
            return emitter.mint(access_token or self.operator_access).promise_token

    def consumer(self) -> ImsClient:
        """A consumer-pair client of the test's own (to probe whether a token still lives)."""
        clients = self.sim.ims_clients()
        return ImsClient(
            self.sim.origin,
            consumer=ImsClientPair(**clients["consumer"]),
            http=httpx.Client(trust_env=False),
        )

    def cli(self, argv: list[str], env: Mapping[str, str] | None = None, **kwargs: Any) -> int:
        """``serenity-allocator sweep --local ...`` on this runtime, with ``env`` as the
        process environment (the claim settings and the emitter pair come from it)."""
        parser = argparse.ArgumentParser()
        sweep_cli.configure(parser)
        args = parser.parse_args(["--local", *argv])
        runtime = self.stack.runtime

        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            result: dict[str, Any] = lambda_handler(event, context, runtime=runtime)
            return result

        return sweep_cli.execute(
            args, LocalInvoker(handler), env={**self.env, **(env or {})}, **kwargs
        )


def ims_env(
    resources: LocalResources, sim: SimulatorServer, key_id: str, table: str
) -> dict[str, str]:
    """The Sweep's IMS-mode environment (no SEMRUSH_TOKEN), pointed at moto and the simulator.

    With the emitter pair and the credentials table, so a real run's releases carry records.
    """
    clients = sim.ims_clients()
    return {
        **cli_env(sim),
        "CREDENTIALS_TABLE": table,
        "SEMRUSH_BASE_URL": sim.origin,
        "IMS_HOST": sim.origin,
        "IMS_CONSUMER_CLIENT_ID": clients["consumer"]["client_id"],
        "IMS_CONSUMER_CLIENT_SECRET": clients["consumer"]["client_secret"],
        "CREDENTIALS_KEY_ARN": key_id,
        "SWEEP_BUCKET": resources.bucket,
        "QUEUE_URL": resources.queue_url,
        "ENVIRONMENT": ENVIRONMENT,
        "SERENITY_DYNAMIC_ALLOCATION": "true",
    }


def cli_env(sim: SimulatorServer) -> dict[str, str]:
    """What the operator's shell holds for the CLI to mint: the emitter pair (loopback IMS)."""
    emitter = sim.ims_clients()["emitter"]
    return {
        "IMS_EMITTER_CLIENT_ID": emitter["client_id"],
        "IMS_EMITTER_CLIENT_SECRET": emitter["client_secret"],
        "IMS_PROMISE_DEFINITION_ID": emitter["promise_definition_id"],
    }


@contextmanager
def ims_sweep_stack(
    resources: LocalResources,
    sim: SimulatorServer,
    moto: MotoServer,
    memberships: list[str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Iterator[ImsSweepStack]:
    """The fleet seeded, an operator who is a member of ``memberships`` (default: all)."""
    seed_fleet(sim)
    access = sim.ims_user(OPERATOR, memberships or [MASTER, *CHILDREN])
    credentials = create_credentials_stack(moto)
    kms, key_id = credentials.kms, credentials.key_id
    env = {**ims_env(resources, sim, key_id, credentials.table_name), **(overrides or {})}
    env = {name: value for name, value in env.items() if value}
    settings = SweepSettings.from_env(env)
    runtime = build_sweep_runtime(settings)
    assert runtime.credentials is not None
    built = runtime.gateway
    assert isinstance(built, SemrushClient)
    built.close()
    client_sleeps, ims_sleeps, sleeps = RecordingSleep(), RecordingSleep(), RecordingSleep()
    # Production's clients, with their backoff sleeps recorded instead of slept.
    runtime.gateway = SemrushClient(
        settings.semrush.base_url,
        runtime.credentials.holder,
        config=SemrushClientConfig(
            timeout_s=settings.semrush.timeout_s,
            max_retries=settings.semrush.max_retries,
            sleep=client_sleeps,
        ),
    )
    clients = sim.ims_clients()
    spy = ImsSpy(
        ImsClient(
            sim.origin,
            consumer=ImsClientPair(**clients["consumer"]),
            config=ImsClientConfig(sleep=ims_sleeps, jitter=no_jitter),
        )
    )
    runtime.credentials.ims = spy
    assert isinstance(runtime.credentials.cipher, KmsTokenCipher)
    runtime.sleep = sleeps
    wall = WallClock()
    runtime.wall_clock = wall
    stack = SweepStack(
        sim=sim,
        resources=resources,
        runtime=runtime,
        sleeps=sleeps,
        client_sleeps=client_sleeps,
        wall=wall,
        sqs=local_client("sqs", resources.endpoint_url),
        s3=local_client("s3", resources.endpoint_url),
    )
    yield ImsSweepStack(stack, spy, key_id, kms, env, access, ims_sleeps, credentials)
    runtime.gateway.close()
    spy.client.close()
