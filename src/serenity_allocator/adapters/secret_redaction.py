r"""Remove a secret from text we are about to log or store, in every form an echo may take.

An upstream that echoes the request can return the bearer token as sent, URL-encoded (a query
or form echo, ``%2F`` or ``%2f``, ``+`` for a space), JSON-escaped (``\/``, ``\"``, ``\uXXXX``),
base64-encoded (a ``Basic`` header or a debug dump, at any byte offset inside a longer blob) or
hex-dumped. Replacing only the exact token lets the encoded echoes through; this module builds
every such form once per secret and replaces them all.

Adobe IMS tokens (access and promise tokens) are JWTs: ``header.payload.signature``, each part
base64url. An echo may carry one part without the others (a validator quoting the signature it
rejected, a log that splits the token at its dots), so each long part of a JWT-shaped secret is
removed on its own as well, in the same forms.

Use it on text only: classifiers read the RAW body (a redacted copy may stop saying what it
said), and only what is logged, raised or stored passes through here.
"""

from __future__ import annotations

import base64
import json
import re
from functools import lru_cache
from typing import Final
from urllib.parse import quote, quote_plus

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
