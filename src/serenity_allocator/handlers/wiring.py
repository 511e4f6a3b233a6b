"""Adapter wiring shared by both functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..adapters.ims_client import ImsClient
    from ..adapters.semrush_client import SemrushClient
    from ..adapters.token_provider import TokenProvider
    from .settings import ImsSettings, SemrushSettings


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


def build_semrush_client(
    semrush: SemrushSettings, tokens: TokenProvider | None = None
) -> SemrushClient:
    """The Semrush client over ``tokens``; without them, the static token (loopback only).

    In IMS mode the caller passes the holder of the current request's access token.
    """
    from ..adapters.semrush_client import SemrushClient
    from ..adapters.token_provider import StaticTokenProvider

    if tokens is None:
        if semrush.token is None:
            raise ValueError("no Semrush token source: IMS mode needs the request token holder")
        tokens = StaticTokenProvider(semrush.token)
    return SemrushClient(
        semrush.base_url, tokens, timeout_s=semrush.timeout_s, max_retries=semrush.max_retries
    )


def build_ims_consumer(
    ims: ImsSettings, *, call_budget_s: float, sleep: Callable[[float], None] | None = None
) -> ImsClient:
    """The IMS client with the consumer pair: from its secret, or the loopback-only env pair."""
    from ..adapters.ims_client import ImsClient, ImsClientPair
    from ..adapters.ims_pair_secret import read_ims_pair

    if ims.consumer_secret_id is not None:
        pair = read_ims_pair(ims.consumer_secret_id, "consumer", call_budget_s=call_budget_s)
    else:
        pair = ImsClientPair(ims.consumer_client_id or "", ims.consumer_client_secret or "")
    if sleep is None:
        return ImsClient(ims.host, consumer=pair)
    return ImsClient(ims.host, consumer=pair, sleep=sleep)
