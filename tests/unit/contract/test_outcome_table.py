"""The callers' contract table is the worker's: every status and code it can emit, in the
schema, the docs and the README, with the worker's own constants agreeing row by row."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest

from serenity_allocator.adapters.request_authority import UnboundTokenError
from serenity_allocator.application.allocator.audit_dead_letters import RECEIVES_EXHAUSTED
from serenity_allocator.application.allocator.final_receive import TERMINAL_UPSTREAM_STATUSES
from serenity_allocator.application.allocator.invocation import INVALID_MESSAGE_CODE
from serenity_allocator.application.allocator.request_ledger import (
    FINAL_RECEIVE_UNFINISHED,
    REQUEST_ID_CONFLICT,
)
from serenity_allocator.application.credentials.request_credentials import DEAD_LETTERED_REFUSALS
from serenity_allocator.contract.outcome_table import outcome_table, parse_table
from serenity_allocator.domain import errors
from serenity_allocator.domain.errors import PARENT_MISMATCH
from serenity_allocator.domain.ledger import (
    LedgerConflictError,
    LedgerRecordUnreadableError,
    LedgerUnavailableError,
)
from serenity_allocator.domain.messages import OutcomeStatus
from serenity_allocator.write_guard import REFUSALS
from serenity_tools.operator.message_schema import OUTCOME_SCHEMA_FILE, rendered_files
from serenity_tools.operator.outcome_docs import (
    OUTCOMES_DOC,
    README,
    README_BEGIN,
    README_END,
    render_readme_table,
)

NEVER_IN_AN_OUTCOME = {"allocationError", "parkedForReclaim"}
"""The base class's code, and a park that ends ``orgPoolExhausted`` on the last receive."""


def _schema() -> Any:
    return json.loads(OUTCOME_SCHEMA_FILE.read_text(encoding="utf-8"))


def test_every_status_and_code_of_the_schema_is_in_the_table_and_back() -> None:
    # Given the checked-in outcome schema and the table
    table = outcome_table()
    properties = _schema()["properties"]
    statuses = {entry["const"] for entry in properties["status"]["oneOf"]}
    choices = properties["error_code"]["anyOf"]
    codes = {entry["const"] for entry in choices if "const" in entry}
    patterns = {entry["pattern"] for entry in choices if "pattern" in entry}

    # Then each status and code (a family by its pattern) is a row, and every row is there
    assert statuses == {row.status for row in table.statuses}
    assert codes == {row.code for row in table.codes if row.pattern is None}
    assert patterns == {row.pattern for row in table.codes if row.pattern}
    # And every one is described
    assert all(entry.get("description") for entry in properties["status"]["oneOf"])
    assert all(entry.get("description") for entry in choices if entry != {"type": "null"})


def test_the_table_statuses_are_the_models() -> None:
    # Given the outcome model's status type / Then its values are the table's, in order
    assert list(typing.get_args(OutcomeStatus)) == [row.status for row in outcome_table().statuses]


def _allocation_errors() -> list[type[errors.AllocationError]]:
    found = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.AllocationError)
    ]
    return [error for error in found if error.code not in NEVER_IN_AN_OUTCOME]


def test_every_code_the_worker_emits_is_a_row() -> None:
    # Given every code the worker ends a request with: the typed errors', the ledger's, the
    # batch's, the audit's, the final receive's, and an upstream answer's
    emitted = {error.code for error in _allocation_errors()} | {
        INVALID_MESSAGE_CODE, RECEIVES_EXHAUSTED, FINAL_RECEIVE_UNFINISHED, REQUEST_ID_CONFLICT,
        PARENT_MISMATCH, "groupBlocked", LedgerUnavailableError.code, LedgerConflictError.code,
        LedgerRecordUnreadableError.code, UnboundTokenError.code,
    }  # fmt: skip
    table = outcome_table()
    exact = {row.code for row in table.codes if row.pattern is None}

    # Then every one has its own row, and no row is a code nothing emits
    assert emitted == exact
    assert table.code_row(errors.error_code_of(errors.UpstreamError(503, ""))) is not None
    assert table.code_row(errors.error_code_of(errors.MalformedResponseError())) is not None


def test_the_retried_column_is_the_typed_errors_transient_flag() -> None:
    # Given each typed error the worker emits / Then a transient one is retried, a terminal one
    # is not (the pool is "maybe": with sibling reclaim on it waits across receives)
    table = outcome_table()
    for error in _allocation_errors():
        row = table.code_row(error.code)
        assert row is not None
        expected = "maybe" if error.code == "orgPoolExhausted" else error.transient
        assert row.retried == {True: "yes", False: "no"}.get(expected, expected), error.code


def test_the_terminal_upstream_row_is_the_final_receives_list() -> None:
    # Given the upstream answers no retry fixes / Then exactly those match the terminal row
    table = outcome_table()
    terminal = {
        status
        for status in range(100, 600)
        if (row := table.code_row(f"upstream{status}")) is not None and row.retried == "no"
    }
    assert terminal == TERMINAL_UPSTREAM_STATUSES


def test_the_dead_lettered_refusals_are_the_users_authority_answers() -> None:
    # Given the refusals the worker dead-letters / Then each is answered as the user's
    # authority: its own code, and a record the worker cannot read as "no usable credential"
    # (the remedy is the same: hand the token over again, correctly)
    table = outcome_table()
    assert {code: table.answer("failed", code) for code in DEAD_LETTERED_REFUSALS} == {
        "needsReauth": "needsReauth",
        "noCredential": "noCredential",
        "credentialUnreadable": "noCredential",
    }


def test_every_refusing_answer_has_the_python_error_the_table_names() -> None:
    # Given the table's answers that raise / Then the guard's refusal for each is that error
    refusing = {row.answer: row.python_error for row in outcome_table().answers if row.python_error}
    assert {code: error.__name__ for code, error in REFUSALS.items()} == refusing
    assert all(error.code == code for code, error in REFUSALS.items())


@pytest.mark.parametrize("path", [OUTCOMES_DOC, README], ids=lambda p: p.name)
def test_the_docs_tables_are_generated_from_the_table(path: Path) -> None:
    # Given docs/outcomes.md and the README / When rendered from the table now
    # Then they are identical (regenerate: serenity-allocator message-schema --write)
    assert path.read_text(encoding="utf-8") == rendered_files()[path]


def test_the_readme_outcomes_section_equals_the_generated_table() -> None:
    # Given the README's marked section / Then it is the generated table, once
    readme = README.read_text(encoding="utf-8")
    begin, end = readme.index(README_BEGIN), readme.index(README_END) + len(README_END)
    assert readme[begin:end] == render_readme_table()
    assert readme.count(README_BEGIN) == 1


def test_a_table_row_with_an_unknown_answer_is_refused_naming_it() -> None:
    # Given the table with one code answered by a word the table does not define
    document = json.loads(
        (Path(__file__).parents[3] / "src/serenity_allocator/contract/outcomes.json").read_text()
    )
    document["codes"][0]["answer"] = "allocationExceeded"
    # When parsed / Then it is refused, naming the row
    with pytest.raises(ValueError, match=r"codes\.orgPoolExhausted\.answer"):
        parse_table(document)
