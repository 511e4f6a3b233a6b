"""What the httpx-based adapters share: one TLS context, owned clients, ``Retry-After``.

One TLS context for the process, closing only a client an adapter built, and reading the
delay-seconds form of ``Retry-After`` (Semrush's 429 and IMS's answers both carry it).
"""

from __future__ import annotations

import functools
import math
import ssl
from types import TracebackType
from typing import Self

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context, httpx's default (certifi's CA bundle, ``SSL_CERT_FILE``).

    httpx builds a context per client, and loading the CA bundle costs about 27 ms of CPU: a
    container's Semrush and IMS clients share this one instead (read once, like the
    configuration), and so does every client a test builds.
    """
    return httpx.create_ssl_context()


class OwnedHttpClient:
    """``close``, ``with`` support and a repr naming only the origin (never a credential).

    A subclass sets ``origin``, ``_http`` and ``_owns_http`` (True when it built the client; an
    injected one is the caller's to close).
    """

    origin: str
    _http: httpx.Client
    _owns_http: bool

    def close(self) -> None:
        """Close the HTTP client if this object built it (an injected one is the caller's)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(origin={self.origin!r})"


def retry_after_s(value: str | None) -> float | None:
    """The delay-seconds form of ``Retry-After``; None for none, an HTTP-date or garbage."""
    # An HTTP-date falls back to the backoff (no clock needed).
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds
