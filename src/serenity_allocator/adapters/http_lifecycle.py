"""The lifecycle an httpx-based adapter shares: it closes only the client it built itself."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import httpx


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
