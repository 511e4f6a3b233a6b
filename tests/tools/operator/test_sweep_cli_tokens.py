"""The sweep CLI takes the operator's token from a variable or a file, never from a flag value."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from serenity_allocator.adapters.http_edge import redact_secret
from serenity_tools.operator import sweep_cli
from serenity_tools.operator.sweep_credentials import (
    ACCESS_TOKEN_ENV,
    PROMISE_TOKEN_ENV,
    OperatorToken,
    read_operator_token,
)
from serenity_tools.operator.sweep_payloads import SweepCliError

TOKEN = "eyJhbGciOi.operator-token-never-shown.sig"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    return parser.parse_args(["--local", "--parent", "m1", *argv])


def test_the_access_token_comes_from_its_variable() -> None:
    token = read_operator_token(parse([]), {ACCESS_TOKEN_ENV: f"  {TOKEN}\n"})
    assert token == OperatorToken("access", TOKEN, ACCESS_TOKEN_ENV)
    assert TOKEN not in repr(token)


def test_the_promise_token_comes_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "promise"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    token = read_operator_token(parse(["--promise-token-file", str(path)]), {})
    assert token == OperatorToken("promise", TOKEN, "--promise-token-file")


def test_no_token_is_none() -> None:
    assert read_operator_token(parse([]), {"UNRELATED": "x"}) is None


def test_two_tokens_are_refused_naming_their_sources_only(tmp_path: Path) -> None:
    path = tmp_path / "access"
    path.write_text(TOKEN, encoding="utf-8")
    args = parse(["--access-token-file", str(path)])
    with pytest.raises(SweepCliError) as refused:
        read_operator_token(args, {PROMISE_TOKEN_ENV: TOKEN})
    message = str(refused.value)
    assert message == (f"give one token, not several (--access-token-file, {PROMISE_TOKEN_ENV})")


def test_a_blank_token_is_refused() -> None:
    with pytest.raises(SweepCliError, match=f"{PROMISE_TOKEN_ENV}: the token is blank"):
        read_operator_token(parse([]), {PROMISE_TOKEN_ENV: " \n"})


def test_a_token_typed_where_the_path_goes_is_never_printed_back() -> None:
    # Given a token passed as a flag value (argparse takes --access-token as the file flag)
    args = parse(["--access-token", TOKEN])
    assert args.access_token_file == TOKEN

    # When it is read / Then the refusal names the flag only, not what was typed
    with pytest.raises(SweepCliError) as refused:
        read_operator_token(args, {})
    message = str(refused.value)
    assert message == "--access-token-file: cannot read the file (FileNotFoundError)"
    assert redact_secret(message, TOKEN) == message


def test_a_token_without_the_claims_bucket_and_key_is_a_configuration_error() -> None:
    # Given a token but neither --sweep-bucket nor --credentials-key-arn (nor their variables)
    args = parse(["--dry-run"])
    err = io.StringIO()

    # When the CLI starts / Then nothing is invoked, and the error says what to give
    def never(payload: dict[str, object]) -> dict[str, object]:
        raise AssertionError("invoked without handing the token over")

    invoker = type("Never", (), {"invoke": staticmethod(never)})()
    code = sweep_cli.execute(
        args, invoker, stdout=io.StringIO(), stderr=err, env={ACCESS_TOKEN_ENV: TOKEN}
    )
    assert code == 2
    assert "--sweep-bucket and --credentials-key-arn" in err.getvalue()
    assert redact_secret(err.getvalue(), TOKEN) == err.getvalue()
