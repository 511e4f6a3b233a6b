"""The Semrush base URL rules: an origin only, https (plain http only for loopback hosts).

Kept apart from the client so the handlers' settings can validate SEMRUSH_BASE_URL at start
without importing httpx (cold start: httpx is loaded only when the client is built).
"""

from __future__ import annotations

import ipaddress
from typing import Final
from urllib.parse import urlsplit

API_PATH: Final = "/enterprise/users/api"
"""Where the User Manager API lives under the origin (the swagger's ``basePath``)."""

_LOOPBACK_NAMES: Final = frozenset({"localhost"})
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


class ConfigurationError(ValueError):
    """The client was configured wrongly (a bad SEMRUSH_BASE_URL); found at construction."""


def _is_loopback_host(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_origin(url: str) -> bool:
    """True when ``url``'s host is loopback (127.0.0.0/8, ::1 or ``localhost``).

    Never raises: anything unparseable is not loopback. The worker uses it to allow a plain
    token from the environment only against a local simulator.
    """
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return False
    return bool(host) and _is_loopback_host(host or "")


def validate_base_url(url: str) -> str:
    """Check a configured Semrush base URL and return it as a normalized origin.

    An origin only: ``https://host[:port]``, or ``http://`` for a loopback host (the local
    simulator). A path other than ``/``, a query, a fragment, user-info or another scheme is
    rejected. Messages never echo user-info, a query or a fragment (they could hold a secret).

    Args:
        url: The configured value, e.g. ``https://www.semrush.com`` or ``http://127.0.0.1:8765``.

    Returns:
        The origin, lower-cased, without a default port or trailing slash.

    Raises:
        ConfigurationError: The URL is not an acceptable origin; the message says why.
    """
    prefix = "Semrush base URL"
    text = url.strip() if isinstance(url, str) else ""
    if not text:
        raise ConfigurationError(
            f"{prefix} is empty; expected an origin like https://www.semrush.com"
        )
    if any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise ConfigurationError(f"{prefix} must not contain whitespace or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        # from None: the parser's message quotes the URL, which may carry credentials.
        raise ConfigurationError(f"{prefix} is not a valid URL (bad host or port)") from None
    scheme = parts.scheme.lower()
    if "@" in parts.netloc:
        raise ConfigurationError(f"{prefix} must not contain user-info (credentials)")
    if scheme not in _DEFAULT_PORTS:
        raise ConfigurationError(
            f"{prefix} must be an https origin (http only for loopback hosts), "
            "e.g. https://www.semrush.com"
        )
    host = (parts.hostname or "").lower()
    if not host:
        raise ConfigurationError(f"{prefix} has no host")
    if "?" in text:
        raise ConfigurationError(f"{prefix} must be an https origin without a query")
    if "#" in text:
        raise ConfigurationError(f"{prefix} must be an https origin without a fragment")
    if parts.path not in ("", "/"):
        shown = parts.path if len(parts.path) <= 60 else parts.path[:60] + "..."
        raise ConfigurationError(
            f"{prefix} must be an https origin without a path: got path {shown!r} "
            f"(the client appends {API_PATH} itself)"
        )
    if scheme == "http" and not _is_loopback_host(host):
        raise ConfigurationError(
            f"{prefix} must use https: plain http is allowed only for loopback hosts "
            f"(127.0.0.0/8, ::1, localhost), got host {host!r}"
        )
    shown_host = f"[{host}]" if ":" in host else host
    explicit_port = f":{port}" if port is not None and port != _DEFAULT_PORTS[scheme] else ""
    return f"{scheme}://{shown_host}{explicit_port}"
