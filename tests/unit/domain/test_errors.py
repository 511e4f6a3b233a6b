"""Typed allocation errors: stable codes, client-safe messages."""

from __future__ import annotations

import re

import pytest

from serenity_allocator.domain.errors import (
    AllocationError,
    BrandAiLimitError,
    MalformedExchangeError,
    OrgPoolExhaustedError,
    OutOfTimeError,
    RateLimitedError,
    SettleTimeoutError,
    UpstreamError,
    UpstreamUnavailableError,
    WorkspaceBusyError,
    error_code_of,
)

# Codes other services and dashboards match on: changing one is a breaking change.
PUBLISHED_CODES: dict[type[AllocationError], tuple[str, bool]] = {
    OrgPoolExhaustedError: ("orgPoolExhausted", False),
    BrandAiLimitError: ("brandAiLimit", False),
    WorkspaceBusyError: ("workspaceBusy", True),
    SettleTimeoutError: ("settleTimeout", True),
    OutOfTimeError: ("outOfTime", True),
    RateLimitedError: ("rateLimited", True),
    UpstreamUnavailableError: ("upstreamUnavailable", True),
}


def _all_subclasses(cls: type[AllocationError]) -> list[type[AllocationError]]:
    found: list[type[AllocationError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_all_subclasses(sub)]
    return sorted(set(found), key=lambda sub: sub.code)


ALL_ERRORS = _all_subclasses(AllocationError)


def _instance(cls: type[AllocationError]) -> AllocationError:
    # The one error that carries data gets numbers on purpose: they must not leak.
    if issubclass(cls, BrandAiLimitError):
        return cls("prompts", 4200, 3100)
    return cls()


@pytest.mark.parametrize(("cls", "published"), list(PUBLISHED_CODES.items()))
def test_allocation_error_published_codes_are_stable(
    cls: type[AllocationError], published: tuple[str, bool]
) -> None:
    # Given a published error / When its code and transience are read / Then they are unchanged
    assert (cls.code, cls.transient) == published


def test_allocation_error_codes_are_unique_camel_case() -> None:
    # Given every AllocationError subclass the domain defines
    codes = [cls.code for cls in ALL_ERRORS]

    # When their codes are compared / Then each is distinct and a camelCase word
    assert set(PUBLISHED_CODES) <= set(ALL_ERRORS)
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", code) for code in codes)


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda cls: cls.code)
def test_allocation_error_message_carries_no_ids_or_numbers(cls: type[AllocationError]) -> None:
    # Given an error built as the domain builds it
    error = _instance(cls)

    # When rendered for a client / Then no digit (id, pool count, ceiling) appears
    assert str(error) == cls.message
    assert not any(char.isdigit() for char in str(error))


def test_brand_ai_limit_error_keeps_its_data_on_attributes() -> None:
    # Given a brand-limit refusal / When raised
    error = BrandAiLimitError("prompts", 4200, 3100)

    # Then the numbers stay available to logs, on attributes, not in the message
    assert (error.dimension, error.requested, error.ceiling) == ("prompts", 4200, 3100)


def test_upstream_error_carries_status_and_a_bounded_body() -> None:
    # Given a long upstream body
    error = UpstreamError(500, "x" * 1000, "transfer")

    # When rendered / Then status and operation appear, the body is cut to an excerpt
    assert error.status == 500
    assert str(error).startswith("transfer: upstream answered 500: ")
    assert len(str(error)) < 300


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (WorkspaceBusyError(), "workspaceBusy"),
        (UpstreamError(403, "forbidden", "read"), "upstream403"),
        (KeyError("the bug"), "KeyError"),
    ],
)
def test_error_code_of_is_the_typed_code_the_upstream_status_or_the_kind(
    exc: Exception, expected: str
) -> None:
    # Given a typed error, an upstream answer and an unforeseen failure
    # When each is given its code / Then one mapping serves outcomes, logs and sweep reports
    assert error_code_of(exc) == expected


@pytest.mark.parametrize(
    ("body", "operation", "text"),
    [
        ("y" * 200, "", "upstream answered 502: " + "y" * 200),
        ("y" * 201, "read_status", "read_status: upstream answered 502: " + "y" * 200 + "..."),
    ],
)
def test_upstream_error_keeps_a_body_of_200_characters_whole_and_cuts_a_longer_one(
    body: str, operation: str, text: str
) -> None:
    error = UpstreamError(502, body, operation) if operation else UpstreamError(502, body)
    assert str(error) == text


class _CodedError(Exception):
    def __init__(self, code: object) -> None:
        super().__init__("coded")
        self.code = code


@pytest.mark.parametrize("code", ["", 7, None])
def test_error_code_of_ignores_a_code_that_is_not_a_non_empty_string(code: object) -> None:
    assert error_code_of(_CodedError(code)) == "_CodedError"


def test_a_malformed_exchange_keeps_the_rolled_token_and_never_shows_it() -> None:
    # Given an exchange answer without an access token, its rolled token kept
    error = MalformedExchangeError("rolled-secret")

    # Then the caller can store the token; the text and the repr name the fault, not the token
    assert error.rolled == "rolled-secret"
    assert str(error) == "IMS exchange: answer has no access_token (the rolled token is kept)"
    assert repr(error) == "MalformedExchangeError(rolled=***)"
