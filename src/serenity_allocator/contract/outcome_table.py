"""The callers' contract, read from ``outcomes.json``: what each outcome means and is answered.

A status's row says whether it serves an ensure (``proceed``), is no ensure's answer (``wait``)
or is answered by its code (``byCode``); a code's row says what it means, whether anything was
applied, whether the worker retried it and the customer's answer. Codes match exactly first,
then by the pattern rows in order (``upstream<status>``, an unforeseen failure's kind). Adding a
code is one row in the file.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, cast

CustomerAnswer = Literal[
    "proceed",
    "wait",
    "quotaExceeded",
    "accessDenied",
    "needsReauth",
    "noCredential",
    "deadlineExceeded",
    "configurationFault",
]
Applied = Literal["yes", "no", "maybe"]
TABLE_FILE = "outcomes.json"


@dataclass(frozen=True)
class AnswerRow:
    """One customer answer: its HTTP status, what the customer hears, the guards' errors."""

    answer: CustomerAnswer
    http_status: int | None
    says: str
    meaning: str
    python_error: str | None
    node_error: str | None


@dataclass(frozen=True)
class StatusRow:
    """One outcome status."""

    status: str
    kinds: tuple[str, ...]
    meaning: str
    applied: Applied
    answer: CustomerAnswer | Literal["byCode"]
    unknown_code_answer: CustomerAnswer | None
    """The answer of a ``byCode`` status whose code is absent or in no row."""


@dataclass(frozen=True)
class CodeRow:
    """One error code, or a family of them (``pattern``)."""

    code: str
    pattern: str | None
    statuses: tuple[str, ...]
    kinds: tuple[str, ...]
    meaning: str
    applied: Applied
    retried: Applied
    answer: CustomerAnswer
    example: str | None = None
    """A code of a pattern row's family (the docs and the tests use it)."""

    @property
    def sample(self) -> str:
        """A code this row stands for: its own, or its family's example."""
        return self.example or self.code

    def matches(self, code: str) -> bool:
        """True when ``code`` is this row's code (or one of its family)."""
        if self.pattern is None:
            return code == self.code
        return re.fullmatch(self.pattern.removeprefix("^").removesuffix("$"), code) is not None


@dataclass(frozen=True)
class OutcomeTable:
    """The whole table, as ``outcomes.json`` holds it."""

    version: int
    answers: tuple[AnswerRow, ...]
    statuses: tuple[StatusRow, ...]
    codes: tuple[CodeRow, ...]

    def status_row(self, status: str) -> StatusRow | None:
        """The row of ``status``, or None for a status the table does not know."""
        return next((row for row in self.statuses if row.status == status), None)

    def code_row(self, code: str) -> CodeRow | None:
        """The row ``code`` falls in: its exact row first, else the first pattern that matches."""
        exact = next((row for row in self.codes if row.pattern is None and row.code == code), None)
        if exact is not None:
            return exact
        return next((row for row in self.codes if row.pattern and row.matches(code)), None)

    def answer(self, status: str, code: str | None) -> CustomerAnswer:
        """What a service answers for an ensure's outcome of ``status`` and ``code``.

        An unknown status is neither applied nor refused (``wait``); a refusal status is
        answered by its code, or by its own fallback when the code is absent or unknown.
        """
        row = self.status_row(status)
        if row is None:
            return "wait"
        if row.answer != "byCode":
            return row.answer
        code_row = self.code_row(code) if code else None
        if code_row is not None:
            return code_row.answer
        assert row.unknown_code_answer is not None  # checked when the table is read
        return row.unknown_code_answer

    def answer_row(self, answer: CustomerAnswer) -> AnswerRow:
        """The row of one customer answer."""
        return next(row for row in self.answers if row.answer == answer)


def parse_table(document: dict[str, Any]) -> OutcomeTable:
    """The table of a decoded ``outcomes.json``; ValueError naming what breaks it."""
    answers = tuple(AnswerRow(**row) for row in document["answers"])
    statuses = tuple(
        StatusRow(**{**row, "kinds": tuple(row["kinds"])}) for row in document["statuses"]
    )
    codes = tuple(
        CodeRow(**{**row, "statuses": tuple(row["statuses"]), "kinds": tuple(row["kinds"])})
        for row in document["codes"]
    )
    table = OutcomeTable(int(document["version"]), answers, statuses, codes)
    _check(table)
    return table


def _check(table: OutcomeTable) -> None:
    known: set[str] = {row.answer for row in table.answers}
    for status in table.statuses:
        _check_status(status, known)
    statuses = {row.status for row in table.statuses}
    for code in table.codes:
        _check_code(code, known, statuses)
    names = [row.code for row in table.codes]
    if len(set(names)) != len(names):
        raise ValueError("codes: a code appears twice")


def _check_status(row: StatusRow, known: set[str]) -> None:
    if row.answer not in known | {"byCode"}:
        raise ValueError(f"statuses.{row.status}.answer: unknown answer {row.answer!r}")
    if (row.answer == "byCode") != (row.unknown_code_answer in known):
        raise ValueError(f"statuses.{row.status}.unknown_code_answer: byCode statuses only")


def _check_code(row: CodeRow, known: set[str], statuses: set[str]) -> None:
    if row.answer not in known - {"proceed", "wait"}:
        raise ValueError(f"codes.{row.code}.answer: not a refusal's answer")
    if not set(row.statuses) <= statuses:
        raise ValueError(f"codes.{row.code}.statuses: a status the table does not know")
    if row.pattern is not None and (row.example is None or not row.matches(row.example)):
        raise ValueError(f"codes.{row.code}.example: a pattern row needs a matching example")


@functools.cache
def outcome_table() -> OutcomeTable:
    """The contract table shipped with the package (read once)."""
    text = resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8")
    return parse_table(cast(dict[str, Any], json.loads(text)))
