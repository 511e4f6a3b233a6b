r"""The HTTPS edge the Semrush and IMS clients share, importable without httpx.

In order:

- The origin rules. The Semrush base URL is an origin only, that nobody can spoof:
  ``https://`` plus an ASCII DNS name of at least two labels, on the default port; plain http,
  IP literals and other ports only for a loopback host (the local simulator). Nothing but the
  scheme, the host and an optional port: no user-info, path, query or fragment. The template's
  ``SemrushBaseUrl`` AllowedPattern states the same rule for deployed stacks (which never
  target loopback), and a test keeps the two in agreement. The IMS client checks its origin
  with the same loopback and DNS-name rules.
- The Semrush client's retry budget and reading ``Retry-After`` (Semrush's 429, IMS's answers).
- One TLS context for the process, and closing only a client an adapter built.
- Removing a secret from text we are about to log or store, in every form an echo may take.
  An upstream that echoes the request can return the bearer token as sent, URL-encoded (a
  query or form echo, ``%2F`` or ``%2f``, ``+`` for a space), JSON-escaped (``\/``, ``\"``,
  ``\uXXXX``), base64-encoded (a ``Basic`` header or a debug dump, at any byte offset inside a
  longer blob) or hex-dumped. Replacing only the exact token lets the encoded echoes through;
  every such form is built once per secret and all are replaced. Adobe IMS tokens (access and
  promise tokens) are JWTs: ``header.payload.signature``, each part base64url. An echo may
  carry one part without the others (a validator quoting the signature it rejected, a log
  that splits the token at its dots), so each long part of a JWT-shaped secret is removed on
  its own as well, in the same forms. Use it on text only: classifiers read the RAW body (a
  redacted copy may stop saying what it said), and only what is logged, raised or stored
  passes through here.

httpx is imported only where a client is built (:func:`tls_context`), so the handlers'
settings validate ``SEMRUSH_BASE_URL`` and read the retry budget at start without loading it.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import json
import math
import re
import ssl
from functools import lru_cache
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self
from urllib.parse import SplitResult, quote, quote_plus, urlsplit

if TYPE_CHECKING:
    import httpx

# -- the origin rules ------------------------------------------------------------------------

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


# -- retries -----------------------------------------------------------------------------------

MAX_RETRIES = 2
"""Retries on 429, 5xx and transport errors. The one place it is written
(``SEMRUSH_MAX_RETRIES``).

With the per-request timeout (``domain.transfer.CALL_BUDGET_S``, 15 s) and no deadline, one call
takes up to 3 x 15 s plus, per retry, the backoff (0.5 s, 1 s) or a ``Retry-After`` of up to
10 s: 65 s, more than the Allocator's 60 s timeout (and 15 s more for the one retry after a
401). What bounds a call is the invocation's deadline (``SemrushClient.limit_time``, which both
handlers set to at most the remaining time less ``SAFETY_MARGIN_MS``): no attempt starts past
it, each attempt's timeout is cut to the time left, and a retry that would not leave time for a
request is not taken."""


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


# -- TLS and owned clients --------------------------------------------------------------------


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context, httpx's default (certifi's CA bundle, ``SSL_CERT_FILE``).

    httpx builds a context per client, and loading the CA bundle costs about 27 ms of CPU: a
    container's Semrush and IMS clients share this one instead (read once, like the
    configuration), and so does every client a test builds.
    """
    import httpx  # here, not at import: the settings read this module at start (cold start)

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


# -- secret redaction -------------------------------------------------------------------------

REDACTED: Final = "***"
"""What a removed secret reads as."""

_PERCENT_ESCAPE = re.compile(r"%([0-9A-F])([0-9A-F])")
# A base64 core shorter than this could match ordinary text by chance.
_MIN_BASE64_CORE = 8
_URLSAFE = str.maketrans("+/", "-_")
# Three or more dot-separated base64url parts: a JWT (JWS compact) or JWE-shaped token.
_JWT_SHAPED = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+){2,}")
# A JWT part shorter than this is not removed on its own: it could be ordinary text.
_MIN_JWT_PART = 16


def _url_forms(secret: str) -> set[str]:
    once = {quote(secret, safe=""), quote(secret), quote_plus(secret), quote_plus(secret, safe="")}
    twice = {quote(form, safe="") for form in once}  # a URL inside a URL
    return once | twice


def _json_escapes(text: str) -> set[str]:
    forms = {json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]}
    # Some encoders (PHP's json_encode among them) also escape "/" as "\/".
    return forms | {form.replace("/", r"\/") for form in forms}


def _json_forms(secret: str) -> set[str]:
    once = _json_escapes(secret)
    twice = {form for inner in once for form in _json_escapes(inner)}  # JSON in a JSON string
    return once | twice


def _base64_forms(secret: str) -> set[str]:
    """The base64 characters that depend on the secret alone, at each of the 3 byte offsets."""
    raw = secret.encode("utf-8")
    forms: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        whole_groups = (offset + len(raw)) // 3
        # Skip the group that mixes in the bytes before the secret, and the last partial group
        # (it depends on the bytes after it).
        core = encoded[4 if offset else 0 : 4 * whole_groups]
        if len(core) >= _MIN_BASE64_CORE:
            forms.add(core)
    # On its own, the whole encoding (its last group is the secret's too), padded or not.
    whole = base64.b64encode(raw).decode("ascii")
    forms |= {whole, whole.rstrip("=")}
    return forms | {form.translate(_URLSAFE) for form in forms}


def _pattern_piece(form: str) -> str:
    # Percent-escapes match in either case (%2F and %2f); everything else literally.
    escaped = re.escape(form)
    return _PERCENT_ESCAPE.sub(lambda m: f"%[{m[1]}{m[1].lower()}][{m[2]}{m[2].lower()}]", escaped)


def _forms(secret: str) -> set[str]:
    forms = {secret, secret.encode("utf-8").hex(), secret.encode("utf-8").hex().upper()}
    return forms | _url_forms(secret) | _json_forms(secret) | _base64_forms(secret)


def _jwt_parts(secret: str) -> list[str]:
    """The long parts of a JWT-shaped secret (none for any other shape)."""
    if not _JWT_SHAPED.fullmatch(secret):
        return []
    return [part for part in secret.split(".") if len(part) >= _MIN_JWT_PART]


@lru_cache(maxsize=32)
def _secret_forms(secret: str) -> tuple[tuple[str, str], ...]:
    """Every form of ``secret``, longest first, each with its lower-cased copy."""
    forms = _forms(secret)
    for part in _jwt_parts(secret):
        forms |= _forms(part)
    # Longest first: an encoded form may contain a shorter one (never leave half of it).
    ordered = sorted((form for form in forms if form), key=len, reverse=True)
    return tuple((form, form.lower()) for form in ordered)


@lru_cache(maxsize=64)
def _pattern(forms: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(_pattern_piece(form) for form in forms))


def redact_secret(text: str, secret: str | None) -> str:
    r"""Return ``text`` with ``secret`` replaced by ``***`` in every form an echo may take.

    Covers the secret as is, URL-encoded (once or twice, either hex case, ``+`` or ``%20`` for
    a space), JSON-escaped (with or without ``\/`` and ``\uXXXX``, once or as JSON inside a
    JSON string), base64 and base64url at any byte offset, and hex; for a JWT-shaped secret
    (an IMS token), each part of 16 characters or more on its own too.

    Args:
        text: Text about to be logged, raised or stored (an upstream body, an error message).
        secret: The secret; ``None`` or empty leaves ``text`` unchanged.

    Returns:
        The text without any recognisable form of the secret.
    """
    if not secret or not text:
        return text
    # Compile only the forms the text can hold: a form the pattern matches is, lower-cased, a
    # substring of the lower-cased text (only percent-escapes match in either case), so this
    # drops none that could match. A token's full pattern takes tens of milliseconds to compile
    # (an IMS JWT's forms run to ~18 000 characters) and tokens are per request now.
    folded = text.lower()
    present = tuple(form for form, lower in _secret_forms(secret) if lower in folded)
    return _pattern(present).sub(REDACTED, text) if present else text
