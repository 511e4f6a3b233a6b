"""The bearer token: never logged or raised by the client, and the static token provider."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    StaticTokenProvider,
    TokenProviderError,
)
from serenity_allocator.domain.errors import UpstreamError, UpstreamUnavailableError
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.simulator import SimulatorServer
from tests.unit.adapters.semrush.helpers import (
    SECRET_TOKEN,
    closed_port_origin,
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
