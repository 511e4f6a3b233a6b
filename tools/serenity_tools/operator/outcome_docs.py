"""The callers' contract as documents: docs/outcomes.md and the README's outcomes table.

Both are generated from ``src/serenity_allocator/contract/outcomes.json`` (the one source of
truth) by ``serenity-allocator message-schema --write``; tests fail when either drifts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from serenity_allocator.contract.outcome_table import OutcomeTable, outcome_table

ROOT = Path(__file__).resolve().parents[3]
OUTCOMES_DOC = ROOT / "docs" / "outcomes.md"
README = ROOT / "README.md"
README_BEGIN = "<!-- outcomes:begin -->"
README_END = "<!-- outcomes:end -->"
_GENERATED = (
    "Generated from [src/serenity_allocator/contract/outcomes.json]"
    "({prefix}src/serenity_allocator/contract/outcomes.json) by "
    "`serenity-allocator message-schema --write`; do not edit by hand."
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _http(table: OutcomeTable, answer: str) -> str:
    row = table.answer_row(answer)  # type: ignore[arg-type]
    return "-" if row.http_status is None else f'{row.http_status} "{row.says}"'


def _answers(table: OutcomeTable) -> list[str]:
    rows: list[tuple[str, ...]] = []
    for row in table.answers:
        error = f"`{row.python_error}` / `{row.node_error}`" if row.python_error else "-"
        heard = _http(table, row.answer) if row.http_status else row.says
        rows.append((f"`{row.answer}`", heard, error, _cell(row.meaning)))
    return _markdown_table(("answer", "the customer hears", "Python / Node error", "meaning"), rows)


def _statuses(table: OutcomeTable) -> list[str]:
    rows: list[tuple[str, ...]] = []
    for row in table.statuses:
        answer = f"`{row.answer}`"
        if row.answer == "byCode":
            answer = f"by its code (none, or one in no row: `{row.unknown_code_answer}`)"
        kinds = ", ".join(row.kinds)
        rows.append((f"`{row.status}`", kinds, row.applied, answer, _cell(row.meaning)))
    return _markdown_table(("status", "kinds", "applied", "guard's answer", "meaning"), rows)


def _codes(table: OutcomeTable) -> list[str]:
    rows: list[tuple[str, ...]] = []
    for row in table.codes:
        code = f"`{row.code}`"
        if row.pattern:
            code += f" (`{_cell(row.pattern)}`, e.g. `{row.example}`)"
        statuses, kinds = ", ".join(row.statuses), ", ".join(row.kinds)
        rows.append(
            (code, statuses, kinds, row.applied, row.retried, f"`{row.answer}`", _cell(row.meaning))
        )
    headers = ("code", "statuses", "kinds", "applied", "retried", "answer", "meaning")
    return _markdown_table(headers, rows)


def _markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines: the header, its rule, one line a row."""
    lines = [f"| {' | '.join(headers)} |", f"|{' --- |' * len(headers)}"]
    lines.extend(f"| {' | '.join(cells)} |" for cells in rows)
    return lines


def render_outcomes_doc() -> str:
    """docs/outcomes.md: every answer, status and code of the callers' contract."""
    table = outcome_table()
    lines = [
        "# Outcomes: the callers' contract",
        "",
        _GENERATED.format(prefix="../"),
        "",
        "Every request ends with one outcome (an EventBridge event, the same as the request "
        "ledger's record; [schema](schemas/allocation-outcome-v1.schema.json)). Its `status` "
        "says what happened and, for `rejected`, `failed` and `invalid`, its `error_code` says "
        "why. Both write guards (Python `WriteGuard`, Node `WriteGuard`) read an ensure's "
        "outcome through this table and raise the error of its answer, carrying the code as "
        "`reason`. An outcome whose status is in no row is neither applied nor refused "
        "(`wait`); an outcome of another request id, workspace or kind is ignored.",
        "",
        "*applied*: whether the request moved any quota (`maybe`: a transfer may have landed "
        "before the failure; the request ledger's intent says which). *retried*: whether the "
        "worker retried the request (the queue redelivered it) before it ended with this code.",
        "",
        "## What a service answers its customer",
        "",
        *_answers(table),
        "",
        "## Statuses",
        "",
        *_statuses(table),
        "",
        "## Error codes",
        "",
        "Matched exactly first, then by the pattern rows in order.",
        "",
        *_codes(table),
        "",
        "## Adding a code",
        "",
        "One row in `codes` of `outcomes.json` (before the pattern rows), then "
        "`serenity-allocator message-schema --write`: the outcome schema, this page, the "
        "README's table, the Node client's table and types follow; add the code's expected "
        "answer to `tests/fixtures/guard-answers.json`, which both guards' table tests check.",
        "",
    ]
    return "\n".join(lines)


def render_readme_table() -> str:
    """The README's outcomes section: one row per customer answer, with its statuses and codes."""
    table = outcome_table()
    lines = [
        README_BEGIN,
        "| the guard raises (`code`) | the customer hears | outcomes |",
        "| --- | --- | --- |",
    ]
    for row in table.answers:
        statuses = [f"`{s.status}`" for s in table.statuses if s.answer == row.answer]
        codes = [f"`{c.code}`" for c in table.codes if c.answer == row.answer]
        error = f"`{row.python_error}` (`{row.answer}`)" if row.python_error else f"({row.answer})"
        heard = _http(table, row.answer) if row.http_status else row.says
        lines.append(f"| {error} | {heard} | {_cell(', '.join(statuses + codes))} |")
    lines += [
        "",
        "Every status and code, what it means, whether anything was applied or retried: "
        "[docs/outcomes.md](docs/outcomes.md). " + _GENERATED.format(prefix=""),
        README_END,
    ]
    return "\n".join(lines)


def readme_with_table(readme: str) -> str:
    """``readme`` with its marked outcomes section replaced by the generated one.

    Raises:
        ValueError: the README has no ``outcomes:begin`` / ``outcomes:end`` markers.
    """
    begin, end = readme.find(README_BEGIN), readme.find(README_END)
    if begin < 0 or end < begin:
        raise ValueError(f"README.md: no {README_BEGIN} ... {README_END} section")
    return readme[:begin] + render_readme_table() + readme[end + len(README_END) :]
