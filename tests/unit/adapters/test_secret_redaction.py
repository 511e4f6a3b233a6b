"""redact_secret: the token goes, in every form an upstream echo may carry it."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from serenity_allocator.adapters.http_edge import REDACTED, redact_secret

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


# ---------------------------------------------------------------- IMS token shapes


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


# An IMS access token is a JWT (header.payload.signature, base64url, no padding); the
# simulator's tokens are a prefix and URL-safe text.
JWT_HEADER = _b64url(b'{"alg":"RS256","x5u":"ims_na1-key-at-1.cer","kid":"ims_na1-key-at-1"}')
JWT_PAYLOAD = _b64url(b'{"type":"access_token","user_id":"u1@AdobeID","expires_in":"86400000"}')
JWT_SIGNATURE = _b64url(bytes((7 * i + 3) % 256 for i in range(256)))  # as an RS256 one
JWT_TOKEN = f"{JWT_HEADER}.{JWT_PAYLOAD}.{JWT_SIGNATURE}"
SIM_ACCESS = "sim-ims-at-Zx_9-kLq2wQeRtY0uIoP1aSdFgHjKlZx"
SIM_PROMISE = "sim-ims-pt-Qw_E-rTy7uIo8pAs9dFg0hJk1lZx2cVb3nM4qW5eR6tY"
IMS_TOKENS = {"jwt access token": JWT_TOKEN, "sim access": SIM_ACCESS, "sim promise": SIM_PROMISE}


@pytest.mark.parametrize("shape", sorted(IMS_TOKENS))
@pytest.mark.parametrize("form", sorted(_echoes(TOKEN)))
def test_redact_secret_removes_every_echoed_form_of_an_ims_token(shape: str, form: str) -> None:
    # Given an IMS token (a JWT, or the simulator's shape) echoed in one form
    token = IMS_TOKENS[shape]
    echoed = _echoes(token)[form]
    body = f'{{"error":"invalid_token","echo":"{echoed}","after":"kept"}}'
    # When it is redacted / Then the form is gone and the rest kept
    shown = redact_secret(body, token)
    assert echoed not in shown
    prefix, suffix = '{"error":"invalid_token","echo":"', '","after":"kept"}'
    assert shown.startswith(prefix) and shown.endswith(suffix)
    left = shown[len(prefix) : -len(suffix)]
    # (of a "Basic" echo only the user name and the groups that mix it with the token stay)
    assert REDACTED in left and len(left.replace(REDACTED, "")) <= 16


@pytest.mark.parametrize(
    ("name", "part"),
    [("header", JWT_HEADER), ("payload", JWT_PAYLOAD), ("signature", JWT_SIGNATURE)],
    ids=["header", "payload", "signature"],
)
@pytest.mark.parametrize("encode", ["raw", "base64", "hex"])
def test_redact_secret_removes_each_part_of_a_jwt_on_its_own(
    name: str, part: str, encode: str
) -> None:
    # Given an echo of one part of a JWT without the rest (a validator quoting the signature
    # it rejected, a log that split the token at its dots)
    echoed = {"raw": part, "base64": _b64(part), "hex": part.encode().hex()}[encode]
    body = f"rejected {name}: {echoed} (end)"
    # When redacted with the whole token / Then that part is gone too
    assert redact_secret(body, JWT_TOKEN) == f"rejected {name}: {REDACTED} (end)"


def test_redact_secret_does_not_split_a_secret_that_is_not_jwt_shaped() -> None:
    # Given a dotted secret whose parts are ordinary words, and a JWT with one short part
    dotted = "release.notes.final-2026"
    short_part_jwt = f"{JWT_HEADER}.e30.{JWT_SIGNATURE}"  # "e30" is "{}": too short to remove
    text = "release notes final-2026 e30"
    # Then neither removes anything from text that holds only a part of it
    assert redact_secret(text, dotted) == text
    assert redact_secret("payload e30 kept", short_part_jwt) == "payload e30 kept"
    # And the whole dotted secret still goes
    assert redact_secret(f"x {dotted} y", dotted) == f"x {REDACTED} y"


def test_redact_secret_removes_an_echo_with_mixed_case_escapes() -> None:
    # Given an echo whose percent-escapes mix both hex cases ("%2F" then "%2b")
    echoed = quote(TOKEN, safe="").replace("%2B", "%2b")
    assert "%2F" in echoed and "%2b" in echoed
    # When redacted / Then it goes like any other form
    assert redact_secret(f"echo {echoed} end", TOKEN) == f"echo {REDACTED} end"
