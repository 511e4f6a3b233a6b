"""Adapter wiring shared by both functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..adapters.semrush_client import SemrushClient
    from .settings import SemrushSettings


@runtime_checkable
class TimeLimited(Protocol):
    """A gateway that can bound its calls (requests, retries, backoff) to a time budget."""

    def limit_time(self, seconds: float | None) -> None:
        """Bound every later call to ``seconds`` from now (None: unbounded)."""
        ...


def limit_gateway_time(gateway: object, seconds: float) -> None:
    """Give a time-limitable gateway this invocation's budget, so no call outlives it."""
    if isinstance(gateway, TimeLimited):
        gateway.limit_time(max(0.0, seconds))


def build_semrush_client(semrush: SemrushSettings) -> SemrushClient:
    """The Semrush client with its token source: a plain token (loopback only) or the secret."""
    from ..adapters.semrush_client import SemrushClient
    from ..adapters.token_provider import SecretsManagerTokenProvider, StaticTokenProvider

    tokens = (
        StaticTokenProvider(semrush.token)
        if semrush.token is not None
        else SecretsManagerTokenProvider(
            semrush.token_secret_id or "", max_age_s=semrush.token_max_age_s
        )
    )
    return SemrushClient(
        semrush.base_url, tokens, timeout_s=semrush.timeout_s, max_retries=semrush.max_retries
    )
