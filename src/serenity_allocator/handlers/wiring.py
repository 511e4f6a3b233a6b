"""Adapter wiring shared by both functions."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..adapters.ims_client import ImsClient, ImsClientPair
    from ..adapters.semrush import SemrushClient, TokenProvider
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
    from ..adapters.semrush import SemrushClient, SemrushClientConfig, StaticTokenProvider

    if tokens is None:
        if semrush.token is None:
            raise ValueError("no Semrush token source: IMS mode needs the request token holder")
        tokens = StaticTokenProvider(semrush.token)
    return SemrushClient(
        semrush.base_url,
        tokens,
        config=SemrushClientConfig(timeout_s=semrush.timeout_s, max_retries=semrush.max_retries),
    )


def build_ims_consumer(
    ims: ImsSettings,
    *,
    call_budget_s: float,
    sleep: Callable[[float], None] | None = None,
    jitter: Callable[[], float] | None = None,
) -> ImsClient:
    """The IMS client with the consumer pair: from its secret, or the loopback-only env pair.

    ``sleep`` and ``jitter`` replace the client's pauses and its retry jitter's draws.
    """
    from ..adapters.ims_client import ImsClient, ImsClientConfig, ImsClientPair, read_ims_pair

    if ims.consumer_secret_id is not None:
        pair = read_ims_pair(
            ims.consumer_secret_id,
            "consumer",
            call_budget_s=call_budget_s,
            pair_name=ims.pair_name,
        )
    else:
        pair = ImsClientPair(ims.consumer_client_id or "", ims.consumer_client_secret or "")
    return ImsClient(
        ims.host,
        consumer=pair,
        config=ImsClientConfig(sleep=sleep or time.sleep, jitter=jitter or random.random),
    )


PairSource = Callable[[], "ImsClientPair"]


def consumer_pair_source(ims: ImsSettings, *, call_budget_s: float) -> PairSource | None:
    """How to read the consumer pair again: from its secret.

    None for the loopback env pair (a changed environment rebuilds the runtime anyway).
    """
    from ..adapters.ims_client import read_ims_pair

    secret_id, name = ims.consumer_secret_id, ims.pair_name
    if secret_id is None:
        return None
    return lambda: read_ims_pair(secret_id, "consumer", call_budget_s=call_budget_s, pair_name=name)


def renew_refused_pair(ims: object, source: PairSource | None) -> bool:
    """Read the consumer pair again when IMS refused it (``invalid_client``) since last read.

    A warm container must not keep a bad pair: after the secret is fixed, its next invocation
    uses the new one. One Secrets Manager read per invocation while the pair stays refused;
    a read that fails keeps the pair in hand (the refusal repeats, alarmed). True when renewed.
    """
    from ..adapters.ims_client import ImsClient, ImsPairSecretError
    from ..adapters.observability import logger

    if source is None or not isinstance(ims, ImsClient) or not ims.pair_refused:
        return False
    try:
        ims.use_consumer(source())
    except ImsPairSecretError as exc:
        logger.warning("IMS consumer pair refused and not read again", extra={"why": str(exc)})
        return False
    logger.info("IMS consumer pair read again after IMS refused it")
    return True


def ready_ims(
    ims: object, settings: ImsSettings | None, *, call_budget_s: float, seconds: float
) -> None:
    """Ready IMS for an invocation: a pair it refused is read again, then its calls are bounded.

    A pair IMS refused last time is read again from its secret (:func:`renew_refused_pair`: a
    warm container never keeps a bad one), each read bounded by ``call_budget_s``; then every
    later IMS call (retries and pauses included) is bounded to ``seconds`` from now.
    """
    source = (
        None if settings is None else consumer_pair_source(settings, call_budget_s=call_budget_s)
    )
    renew_refused_pair(ims, source)
    limit_gateway_time(ims, seconds)
