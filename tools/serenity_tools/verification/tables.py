"""Plain-text tables for the demo and the harness (no dependency, monospace output)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, title: str | None = None
) -> str:
    """Render rows under headers; numeric columns are right-aligned.

    Args:
        headers: Column names.
        rows: One sequence of values per row (None prints as ``-``).
        title: Optional line printed above the table.

    Returns:
        The table, lines joined with newlines (no trailing newline).
    """
    raw = [list(row) for row in rows]
    cells = [[_cell(value) for value in row] for row in raw]
    widths = [len(header) for header in headers]
    for row in cells:
        for index, text in enumerate(row):
            widths[index] = max(widths[index], len(text))
    numeric = [
        bool(raw) and all(_is_number(row[index]) or row[index] is None for row in raw)
        for index in range(len(headers))
    ]

    def line(values: Sequence[str], right: Sequence[bool]) -> str:
        parts = [
            text.rjust(widths[i]) if right[i] else text.ljust(widths[i])
            for i, text in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    out = [title] if title else []
    out.append(line(list(headers), numeric))
    out.append("  ".join("-" * width for width in widths))
    out.extend(line(row, numeric) for row in cells)
    if not cells:
        out.append("(none)")
    return "\n".join(out)
