"""redact_secret: the token goes, in every form an upstream echo may carry it."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from serenity_allocator.adapters.secret_redaction import REDACTED, redact_secret

TOKEN = "tok/SECRET+canary=123"
ODD_TOKEN = 'tok"SECRET\\caf\u00e9 x/1'  # a quote, a backslash, non-ASCII, a space


def _b64(data: str) -> str:
    return base64.b64encode(data.encode("utf-8")).decode("ascii")


def _lower_hex_escapes(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and i + 2 < len(text):
            out.append("%" + text[i + 1 : i + 3].lower())
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _echoes(token: str) -> dict[str, str]:
    """Each way an upstream may echo the token, as it would appear in the body."""
    url = quote(token, safe="")
    return {
        "as sent": token,
        "url-encoded": url,
        "url-encoded, lower-case hex": _lower_hex_escapes(url),
        "url-encoded, path-safe": quote(token),
        "form-encoded": quote_plus(token),
        "url-encoded twice": quote(url, safe=""),
        "json-escaped": json.dumps(token)[1:-1],
        "json-escaped, ascii off": json.dumps(token, ensure_ascii=False)[1:-1],
        "json-escaped, slash escaped": json.dumps(token)[1:-1].replace("/", "\\/"),
        "json inside json": json.dumps(json.dumps(token))[1:-1],
        "base64": _b64(token),
        "base64 unpadded": _b64(token).rstrip("="),
        "base64url": base64.urlsafe_b64encode(token.encode()).decode(),
        "basic auth, offset 0": _b64(f"abc:{token}"),  # 4 bytes before: offset 1
        "basic auth, offset 1": _b64(f"ab:{token}"),  # 3 bytes before: offset 0
        "basic auth, offset 2": _b64(f"svc-user:{token}"),  # 9 bytes before: offset 0
        "basic auth, offset 3": _b64(f"a:{token}"),  # 2 bytes before: offset 2
        "hex": token.encode().hex(),
        "HEX": token.encode().hex().upper(),
    }


@pytest.mark.parametrize("token", [TOKEN, ODD_TOKEN])
@pytest.mark.parametrize("form", sorted(_echoes(TOKEN)))
def test_redact_secret_removes_every_echoed_form(token: str, form: str) -> None:
    # Given an upstream body echoing the token in one form
    echoed = _echoes(token)[form]
    body = f'{{"detail":"Not authenticated","echo":"{echoed}","after":"kept"}}'

    # When it is redacted
    shown = redact_secret(body, token)

    # Then the form is gone, the marker stands in its place, and the rest is kept
    assert echoed not in shown
    assert REDACTED in shown
    assert shown.startswith('{"detail":"Not authenticated","echo":"')
    assert shown.endswith('","after":"kept"}')
    assert "SECRET" not in shown


def test_redact_secret_removes_several_forms_at_once() -> None:
    # Given the token raw, URL-encoded and JSON-escaped in one text
    forms = [TOKEN, quote(TOKEN, safe=""), json.dumps(TOKEN)[1:-1].replace("/", "\\/")]
    text = " | ".join(forms)
    # When redacted / Then each occurrence became the marker
    assert redact_secret(text, TOKEN) == " | ".join([REDACTED] * 3)


@pytest.mark.parametrize("secret", [None, ""])
def test_redact_secret_without_a_secret_changes_nothing(secret: str | None) -> None:
    assert redact_secret("Not authenticated: Bearer x", secret) == "Not authenticated: Bearer x"


def test_redact_secret_leaves_text_without_the_secret_alone() -> None:
    text = '{"message":"workspace not found","id":"ws-123","hint":"%2F is a slash"}'
    assert redact_secret(text, TOKEN) == text
