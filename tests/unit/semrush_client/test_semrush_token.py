"""The bearer token: never logged or raised by the client, and the token providers.

Secrets Manager is a moto server on an ephemeral port, reached through ``AWS_ENDPOINT_URL``
as a deployed function would reach the real service.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from serenity_allocator.adapters.semrush_client import SemrushClient
from serenity_allocator.adapters.token_provider import (
    SecretsManagerTokenProvider,
    StaticTokenProvider,
    TokenProviderError,
)
from serenity_allocator.domain.errors import UpstreamError, UpstreamUnavailableError
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.simulator import SimulatorServer
from tests.unit.semrush_client.helpers import (
    SECRET_TOKEN,
    RecordingSleep,
    closed_port_origin,
    statuses_of,
)

# -- no secret anywhere -------------------------------------------------------------------------


def _exception_texts(exc: BaseException) -> str:
    parts = ["".join(traceback.format_exception(exc))]
    current: BaseException | None = exc
    while current is not None:
        parts.extend([str(current), repr(current), repr(current.args)])
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def test_semrush_client_never_logs_or_raises_the_token(
    sim: SimulatorServer,
    make_client: Callable[..., SemrushClient],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given every logger at DEBUG and a recognisable token
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "serenity_allocator"):
        caplog.set_level(logging.DEBUG, logger=name)
    client = make_client(token_provider=StaticTokenProvider(SECRET_TOKEN), timeout_s=0.2)
    texts: list[str] = [repr(client), repr(StaticTokenProvider(SECRET_TOKEN))]

    # When calls succeed, fail with statuses (one body echoing the token), time out, meet a
    # refused token and a refused connection
    client.read_resources("c1")
    client.transfer("c1", Totals(projects=2, prompts=300))
    client.list_family("m1")
    client.create_child("m1", "Logged")
    sim.faults(
        fail_next=[
            {"status": 500, "count": 4, "op": "status",
             "body": {"message": f"bad header Authorization: Bearer {SECRET_TOKEN}"}},
            {"status": 503, "count": 4, "op": "transfer"},
        ]
    )  # fmt: skip
    failing: list[Callable[[], object]] = [
        lambda: client.read_status("c1"),
        lambda: client.transfer("c1", Totals(projects=3, prompts=300)),
    ]
    for attempt in failing:
        with pytest.raises(UpstreamError) as raised:
            attempt()
        texts.append(_exception_texts(raised.value))
    sim.faults(error_rate={"timeout": 1.0}, timeout_hold_ms=400)
    with pytest.raises(UpstreamUnavailableError) as timed_out:
        client.read_resources("c1")
    texts.append(_exception_texts(timed_out.value))
    sim.faults(error_rate={})
    sim.set_auth(["tok-other"])
    with pytest.raises(UpstreamError) as refused:
        client.read_resources("c1")
    texts.append(_exception_texts(refused.value))
    unreachable = make_client(base_url=closed_port_origin())
    with pytest.raises(UpstreamUnavailableError) as unreachable_error:
        unreachable.read_resources("c1")
    texts.append(_exception_texts(unreachable_error.value))

    # Then the token appears in no log record, no output and no exception, and the
    # exceptions carry no URL either
    captured = capsys.readouterr()
    logged = caplog.text + "\n".join(
        f"{record.getMessage()} {record.args!r}" for record in caplog.records
    )
    assert caplog.records, "expected the HTTP stack to log something at DEBUG"
    for text in [logged, captured.out, captured.err, *texts]:
        assert SECRET_TOKEN not in text
    for text in texts[2:]:
        assert sim.api_url not in text
        assert "http://" not in text.split("Traceback")[0]


# -- token providers ----------------------------------------------------------------------------


def test_static_token_provider_returns_its_token_and_hides_it() -> None:
    # Given a static provider
    provider = StaticTokenProvider(SECRET_TOKEN)

    # When asked, refreshed or printed
    # Then it returns the token and never shows it
    assert provider.get_token() == SECRET_TOKEN
    assert provider.get_token(refresh=True) == SECRET_TOKEN
    assert SECRET_TOKEN not in repr(provider)
    with pytest.raises(TokenProviderError):
        StaticTokenProvider("  ")


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def secretsmanager(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    ):
        monkeypatch.delenv(name, raising=False)
    return boto3.client("secretsmanager")


def _secret_name() -> str:
    # moto's backends are process-wide: unique names keep tests independent.
    return f"semrush-token-{uuid.uuid4().hex}"


@pytest.mark.parametrize(
    "stored", [SECRET_TOKEN, f"  {SECRET_TOKEN}\n", json.dumps({"token": SECRET_TOKEN})]
)
def test_secrets_manager_token_provider_reads_raw_and_json_secrets(
    secretsmanager: Any, stored: str
) -> None:
    # Given a secret holding the token raw or as {"token": ...}
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString=stored)

    # When the provider reads it through AWS_ENDPOINT_URL
    provider = SecretsManagerTokenProvider(name)

    # Then the bare token comes back
    assert provider.get_token() == SECRET_TOKEN


def test_secrets_manager_token_provider_caches_until_refresh(secretsmanager: Any) -> None:
    # Given a provider that has read the secret once
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString="tok-1")
    provider = SecretsManagerTokenProvider(name, max_age_s=300)
    assert provider.get_token() == "tok-1"

    # When the secret rotates
    secretsmanager.put_secret_value(SecretId=name, SecretString="tok-2")

    # Then a plain read is served from the cache and a refresh fetches the new value
    assert provider.get_token() == "tok-1"
    assert provider.get_token(refresh=True) == "tok-2"
    assert provider.get_token() == "tok-2"


def test_secrets_manager_token_provider_refresh_after_401_reaches_the_upstream(
    secretsmanager: Any, sim: SimulatorServer, sleeps: RecordingSleep
) -> None:
    # Given a cached token that the upstream stopped accepting after a rotation
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString="tok-1")
    provider = SecretsManagerTokenProvider(name)
    assert provider.get_token() == "tok-1"
    secretsmanager.put_secret_value(SecretId=name, SecretString=json.dumps({"token": "tok-2"}))
    sim.set_auth(["tok-2"])

    # When the client reads
    with SemrushClient(sim.origin, provider, sleep=sleeps) as client:
        status = client.read_status("c1")

    # Then the 401 fetched the rotated secret and the retry succeeded
    assert status == "created"
    assert statuses_of(sim, "status") == [401, 200]


@pytest.mark.parametrize(
    "stored",
    [json.dumps({"value": SECRET_TOKEN}), json.dumps({"token": ""}), "{" + SECRET_TOKEN, "   "],
)
def test_secrets_manager_token_provider_rejects_a_secret_without_a_token(
    secretsmanager: Any, stored: str
) -> None:
    # Given a secret whose content holds no usable token
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString=stored)

    # When it is read
    with pytest.raises(TokenProviderError) as raised:
        SecretsManagerTokenProvider(name).get_token()

    # Then the error says so without quoting the content
    assert SECRET_TOKEN not in _exception_texts(raised.value)


def test_secrets_manager_token_provider_does_not_cache_a_malformed_secret(
    secretsmanager: Any,
) -> None:
    # Given a provider with a long cache whose secret holds no usable token
    name = _secret_name()
    secretsmanager.create_secret(Name=name, SecretString=json.dumps({"value": SECRET_TOKEN}))
    provider = SecretsManagerTokenProvider(name, max_age_s=3600)
    with pytest.raises(TokenProviderError):
        provider.get_token()

    # When an operator fixes the secret
    secretsmanager.put_secret_value(SecretId=name, SecretString=json.dumps({"token": "tok-ok"}))

    # Then the next read fetches it (the malformed value was not served from the cache), and
    # the good one is cached again
    assert provider.get_token() == "tok-ok"
    secretsmanager.put_secret_value(SecretId=name, SecretString="tok-rotated")
    assert provider.get_token() == "tok-ok"


def test_secrets_manager_token_provider_missing_secret_is_a_provider_error(
    secretsmanager: Any,
) -> None:
    # Given no such secret
    provider = SecretsManagerTokenProvider(_secret_name())

    # When it is read
    # Then a typed error names the failure, with the AWS error as its cause
    with pytest.raises(TokenProviderError, match="could not read") as raised:
        provider.get_token()
    assert raised.value.__cause__ is not None


def test_secrets_manager_token_provider_reads_a_binary_secret(secretsmanager: Any) -> None:
    # Given a secret stored as SecretBinary (UTF-8 JSON)
    name = _secret_name()
    secretsmanager.create_secret(
        Name=name, SecretBinary=json.dumps({"token": SECRET_TOKEN}).encode()
    )

    # When it is read
    # Then the token is decoded from the bytes
    assert SecretsManagerTokenProvider(name).get_token() == SECRET_TOKEN
