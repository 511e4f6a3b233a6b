"""The Semrush base URL rules: an origin only, that nobody can spoof.

``https://`` plus an ASCII DNS name of at least two labels, on the default port; plain http,
IP literals and other ports only for a loopback host (the local simulator). Nothing but the
scheme, the host and an optional port: no user-info, path, query or fragment. The template's
``SemrushBaseUrl`` AllowedPattern states the same rule for deployed stacks (which never target
loopback), and a test keeps the two in agreement.

Kept apart from the client so the handlers' settings can validate SEMRUSH_BASE_URL at start
without importing httpx (cold start: httpx is loaded only when the client is built).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import SplitResult, urlsplit

API_PATH: Final = "/enterprise/users/api"
"""Where the User Manager API lives under the origin (the swagger's ``basePath``)."""

_PREFIX: Final = "Semrush base URL"
_LOOPBACK_NAMES: Final = frozenset({"localhost"})
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}
# The authority, read strictly: a bracketed IPv6 literal or a bare host, then ``:digits``.
# Anything else (``;``, ``\``, ``%``, a second ``:``, a sign in the port) fails to match.
_AUTHORITY: Final = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::(?P<port>[0-9]{1,5}))?")
# RFC 1123 labels in ASCII; the last label starts with a letter, so no numeric or hex form of
# an IPv4 address (``127.1``, ``0x7f.1``, ``169.254.169.254``) passes as a DNS name.
_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_TOP_LABEL: Final = re.compile(r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?")
_MAX_DNS_NAME: Final = 253
_MAX_PORT: Final = 65535


class ConfigurationError(ValueError):
    """The client was configured wrongly (a bad SEMRUSH_BASE_URL); found at construction."""


def _loopback_ip(host: str) -> bool | None:
    """True/False for an IP literal (loopback or not); None when ``host`` is not one."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return None


def _is_loopback_host(host: str) -> bool:
    return host.lower() in _LOOPBACK_NAMES or _loopback_ip(host) is True


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


def is_dns_name(host: str) -> bool:
    """True for an ASCII DNS name of at least two labels whose last label starts with a letter.

    Lower-case input expected. No trailing dot and no IDN: a look-alike (a Cyrillic letter,
    the ideographic full stop U+3002) is refused rather than normalized.
    """
    if not host.isascii() or len(host) > _MAX_DNS_NAME:
        return False
    *labels, top = host.split(".")
    if not labels:
        return False
    return all(_LABEL.fullmatch(label) for label in labels) and bool(_TOP_LABEL.fullmatch(top))


def _split(text: str) -> SplitResult:
    if any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise ConfigurationError(f"{_PREFIX} must not contain whitespace or control characters")
    try:
        return urlsplit(text)
    except ValueError:
        # from None: the parser's message quotes the URL, which may carry credentials.
        raise ConfigurationError(f"{_PREFIX} is not a valid URL (bad host or port)") from None


def _check_shape(text: str, parts: SplitResult) -> str:
    """Scheme, user-info, query, fragment and path; returns the lower-cased scheme."""
    scheme = parts.scheme.lower()
    if "@" in parts.netloc:
        raise ConfigurationError(f"{_PREFIX} must not contain user-info (credentials)")
    if scheme not in _DEFAULT_PORTS:
        raise ConfigurationError(
            f"{_PREFIX} must be an https origin (http only for loopback hosts), "
            "e.g. https://www.semrush.com"
        )
    if "?" in text:
        raise ConfigurationError(f"{_PREFIX} must be an https origin without a query")
    if "#" in text:
        raise ConfigurationError(f"{_PREFIX} must be an https origin without a fragment")
    if parts.path not in ("", "/"):
        shown = parts.path if len(parts.path) <= 60 else parts.path[:60] + "..."
        raise ConfigurationError(
            f"{_PREFIX} must be an https origin without a path: got path {shown!r} "
            f"(the client appends {API_PATH} itself)"
        )
    return scheme


def _split_authority(netloc: str) -> tuple[str, int | None]:
    """The lower-cased host (brackets removed) and the port, if any."""
    if not netloc:
        raise ConfigurationError(f"{_PREFIX} has no host")
    match = _AUTHORITY.fullmatch(netloc)
    if match is None:
        # The value is not echoed: it is not a hostname we could show safely.
        raise ConfigurationError(
            f"{_PREFIX} has characters that do not belong in a host name "
            "(only an ASCII DNS name and an optional :port)"
        )
    port = int(match["port"]) if match["port"] is not None else None
    if port is not None and not 1 <= port <= _MAX_PORT:
        raise ConfigurationError(f"{_PREFIX} is not a valid URL (bad host or port)")
    return match["host"].strip("[]").lower(), port


def _check_remote_host(scheme: str, host: str, port: int | None) -> None:
    """The rules for anything that is not loopback: https, a DNS name, the default port."""
    if scheme == "http":
        raise ConfigurationError(
            f"{_PREFIX} must use https: plain http is allowed only for loopback hosts "
            f"(127.0.0.0/8, ::1, localhost), got host {host!r}"
        )
    if _loopback_ip(host) is not None:
        raise ConfigurationError(
            f"{_PREFIX} must name a DNS host, not an IP literal (got {host!r}); "
            "IP addresses are allowed only for loopback"
        )
    if not is_dns_name(host):
        raise ConfigurationError(
            f"{_PREFIX} host must be an ASCII DNS name of at least two labels "
            "(letters, digits and inner hyphens; no look-alike or non-ASCII characters)"
        )
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        raise ConfigurationError(
            f"{_PREFIX} must use the default https port (443), got port {port}; "
            "other ports are allowed only for loopback"
        )


def validate_base_url(url: str) -> str:
    """Check a configured Semrush base URL and return it as a normalized origin.

    An origin only: ``https://`` plus an ASCII DNS name of two or more labels on the default
    port, or, for a loopback host (the local simulator), ``http://`` or ``https://`` with any
    port. IP literals other than loopback, look-alike or non-ASCII hosts, odd characters in
    the host, a path other than ``/``, a query, a fragment, user-info or another scheme are
    rejected. Messages never echo user-info, a query or a fragment (they could hold a secret).

    Args:
        url: The configured value, e.g. ``https://www.semrush.com`` or ``http://127.0.0.1:8765``.

    Returns:
        The origin, lower-cased, without a default port or trailing slash.

    Raises:
        ConfigurationError: The URL is not an acceptable origin; the message says why.
    """
    text = url.strip() if isinstance(url, str) else ""
    if not text:
        raise ConfigurationError(
            f"{_PREFIX} is empty; expected an origin like https://www.semrush.com"
        )
    parts = _split(text)
    scheme = _check_shape(text, parts)
    host, port = _split_authority(parts.netloc)
    if not _is_loopback_host(host):
        _check_remote_host(scheme, host, port)
    shown_host = f"[{host}]" if ":" in host else host
    explicit_port = f":{port}" if port is not None and port != _DEFAULT_PORTS[scheme] else ""
    return f"{scheme}://{shown_host}{explicit_port}"
