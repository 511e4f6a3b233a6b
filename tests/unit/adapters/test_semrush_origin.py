"""The Semrush base URL check: an origin that cannot be spoofed, and the template agrees."""

from __future__ import annotations

import re

import pytest

from serenity_allocator.adapters.http_edge import (
    ConfigurationError,
    is_dns_name,
    is_loopback_origin,
    validate_base_url,
)
from tests.infrastructure._template import load_template


@pytest.mark.parametrize(
    ("configured", "origin"),
    [
        ("https://www.semrush.com", "https://www.semrush.com"),
        ("https://www.semrush.com/", "https://www.semrush.com"),
        ("  https://www.semrush.com  ", "https://www.semrush.com"),
        ("HTTPS://WWW.Semrush.COM:443", "https://www.semrush.com"),
        ("https://semrush.com", "https://semrush.com"),
        ("https://api-eu.semrush.example", "https://api-eu.semrush.example"),
        ("https://xn--semrsh-9ta.com", "https://xn--semrsh-9ta.com"),  # punycode is ASCII
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("http://127.8.9.10", "http://127.8.9.10"),
        ("http://localhost:8765/", "http://localhost:8765"),
        ("http://LOCALHOST:80", "http://localhost"),
        ("http://[::1]:8765", "http://[::1]:8765"),
        ("https://localhost:8443", "https://localhost:8443"),
        ("http://127.0.0.1:1", "http://127.0.0.1:1"),  # any port on loopback
        ("http://127.0.0.1:65535", "http://127.0.0.1:65535"),
    ],
)
def test_validate_base_url_accepts_origins(configured: str, origin: str) -> None:
    # Given an https DNS origin or a loopback origin
    # When it is validated
    # Then the normalized origin is returned
    assert validate_base_url(configured) == origin


SPOOFED_HOST = "host must be an ASCII DNS name of at least two labels"
IP_LITERAL = "not an IP literal"
OTHER_PORT = "must use the default https port (443)"
ODD_CHARACTERS = "characters that do not belong in a host name"
BAD_PORT = "not a valid URL (bad host or port)"


@pytest.mark.parametrize(
    ("configured", "expected_message"),
    [
        # look-alikes: a Cyrillic letter, the ideographic full stop, a full-width letter
        ("https://www.\u0455emrush.com", SPOOFED_HOST),
        ("https://www\u3002semrush\u3002com", SPOOFED_HOST),
        ("https://www.semrush.\uff43om", SPOOFED_HOST),
        # characters that some parsers take as separators or escapes
        ("https://www.semrush.com;.evil.example", SPOOFED_HOST),
        ("https://evil.example\\.semrush.com", SPOOFED_HOST),
        ("https://www.semrush%2ecom", SPOOFED_HOST),
        ("https://www%2esemrush.com", SPOOFED_HOST),
        ("https://www.semrush.com.", SPOOFED_HOST),
        ("https://semrush", SPOOFED_HOST),
        ("https://-semrush.com", SPOOFED_HOST),
        ("https://semrush-.com", SPOOFED_HOST),
        ("https://www..semrush.com", SPOOFED_HOST),
        ("https://" + "a" * 64 + ".com", SPOOFED_HOST),
        ("https://www.semrush_x.com", SPOOFED_HOST),
        # odd ports
        ("https://www.semrush.com:0", BAD_PORT),
        ("https://www.semrush.com:1", OTHER_PORT),
        ("https://www.semrush.com:8443", OTHER_PORT),
        ("https://www.semrush.com:80", OTHER_PORT),
        ("https://www.semrush.com:99999", BAD_PORT),
        ("http://127.0.0.1:0", BAD_PORT),
        ("https://www.semrush.com:+443", ODD_CHARACTERS),
        ("https://www.semrush.com:", ODD_CHARACTERS),
        ("https://www.semrush.com:443:443", ODD_CHARACTERS),
        # IP literals, the metadata endpoint first, and their numeric disguises
        ("https://169.254.169.254", IP_LITERAL),
        ("https://10.1.2.3", IP_LITERAL),
        ("https://[fd00:ec2::254]", IP_LITERAL),
        ("https://[::ffff:169.254.169.254]", IP_LITERAL),
        ("https://[fe80::1%25eth0]", ODD_CHARACTERS),
        ("https://2852039166", SPOOFED_HOST),  # 169.254.169.254 as one decimal number
        ("https://0xa9fea9fe", SPOOFED_HOST),
        ("https://169.254.43518", SPOOFED_HOST),
        ("https://127.1", SPOOFED_HOST),
        # not an origin
        ("https://www.semrush.com/enterprise/users/api",
         "must be an https origin without a path: got path '/enterprise/users/api'"),
        ("https://www.semrush.com/x", "without a path: got path '/x'"),
        ("https://www.semrush.com?x=1", "without a query"),
        ("https://www.semrush.com/?", "without a query"),
        ("https://www.semrush.com#top", "without a fragment"),
        ("https://user:hunter2@www.semrush.com", "must not contain user-info"),
        ("https://hunter2@www.semrush.com", "must not contain user-info"),
        ("https://www.semrush.com\\@evil.example", "must not contain user-info"),
        ("http://www.semrush.com", "plain http is allowed only for loopback hosts"),
        ("http://10.0.0.1:8765", "plain http is allowed only for loopback hosts"),
        ("http://127.0.0.1.nip.io", "plain http is allowed only for loopback hosts"),
        ("ftp://www.semrush.com", "must be an https origin"),
        ("www.semrush.com", "must be an https origin"),
        ("hunter2:secret@www.semrush.com", "must be an https origin"),
        ("", "is empty"),
        ("https://", "has no host"),
        ("https://[::1", "not a valid URL"),
        ("https://www.sem rush.com", "whitespace"),
    ],
)  # fmt: skip
def test_validate_base_url_rejects_anything_but_a_plain_dns_origin(
    configured: str, expected_message: str
) -> None:
    # Given a configured value that is not an acceptable origin
    # When it is validated
    with pytest.raises(ConfigurationError) as raised:
        validate_base_url(configured)

    # Then the message says why, names the setting's subject and never echoes a credential
    message = str(raised.value)
    assert expected_message in message
    assert message.startswith("Semrush base URL")
    assert "hunter2" not in message
    assert "secret" not in message


def test_validate_base_url_never_echoes_a_query_or_fragment() -> None:
    # Given secrets in the query and the fragment
    # When they are validated
    # Then neither value appears in the error
    for configured in ("https://www.semrush.com?token=abc123", "https://x.com#abc123"):
        with pytest.raises(ConfigurationError) as raised:
            validate_base_url(configured)
        assert "abc123" not in str(raised.value)


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8765", True),
        ("http://127.200.0.1", True),
        ("http://localhost:8765", True),
        ("https://LocalHost", True),
        ("http://[::1]:8765", True),
        ("https://www.semrush.com", False),
        ("http://10.0.0.1", False),
        ("http://127.0.0.1.evil.example", False),
        ("http://[::1", False),
        ("not a url", False),
        ("", False),
    ],
)
def test_is_loopback_origin_recognises_only_loopback_hosts(url: str, loopback: bool) -> None:
    # Given a URL / When it is checked / Then only 127.0.0.0/8, ::1 and localhost count
    assert is_loopback_origin(url) is loopback


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("www.semrush.com", True),
        ("a.b", True),
        ("semrush", False),
        ("169.254.169.254", False),
        ("www.semrush.com.", False),
        ("WWW.SEMRUSH.COM", False),  # callers lower-case first
        ("www.\u0455emrush.com", False),
    ],
)
def test_is_dns_name_accepts_only_plain_ascii_names(host: str, expected: bool) -> None:
    assert is_dns_name(host) is expected


# Deployed stacks never target loopback, so only non-loopback values are compared.
TEMPLATE_AGREEMENT_CASES = [
    "https://www.semrush.com",
    "https://www.semrush.com/",
    "https://WWW.Semrush.COM:443",
    "https://api-eu.semrush.example",
    "https://www.\u0455emrush.com",
    "https://www\u3002semrush\u3002com",
    "https://www.semrush.com;.evil.example",
    "https://evil.example\\.semrush.com",
    "https://www.semrush%2ecom",
    "https://www.semrush.com.",
    "https://semrush",
    "https://-semrush.com",
    "https://www..semrush.com",
    "https://www.semrush.com:0",
    "https://www.semrush.com:1",
    "https://www.semrush.com:8443",
    "https://169.254.169.254",
    "https://[fd00:ec2::254]",
    "https://2852039166",
    "https://127.1",
    "https://www.semrush.com/x",
    "https://www.semrush.com?x=1",
    "https://user@www.semrush.com",
    "http://www.semrush.com",
]


def _python_accepts(url: str) -> bool:
    try:
        validate_base_url(url)
    except ConfigurationError:
        return False
    return True


@pytest.mark.parametrize("url", TEMPLATE_AGREEMENT_CASES)
def test_template_allowed_pattern_agrees_with_the_origin_check(url: str) -> None:
    # Given the template's AllowedPattern for SemrushBaseUrl (CloudFormation matches it whole)
    parameter = load_template()["Parameters"]["SemrushBaseUrl"]
    pattern = re.compile(parameter["AllowedPattern"])
    # When a non-loopback value is checked by both
    # Then CloudFormation and the function accept and refuse exactly the same values
    assert (pattern.fullmatch(url) is not None) is _python_accepts(url)
    # And the default itself passes both
    assert pattern.fullmatch(parameter["Default"])
    assert _python_accepts(parameter["Default"])
