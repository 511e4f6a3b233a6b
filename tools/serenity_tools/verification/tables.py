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
    widths = _widths(headers, cells)
    numeric = [_is_numeric_column(raw, index) for index in range(len(headers))]
    out = [title] if title else []
    out.append(_line(list(headers), widths, numeric))
    out.append("  ".join("-" * width for width in widths))
    out.extend(_line(row, widths, numeric) for row in cells)
    if not cells:
        out.append("(none)")
    return "\n".join(out)


def _widths(headers: Sequence[str], cells: Sequence[Sequence[str]]) -> list[int]:
    return [
        max([len(header), *(len(row[index]) for row in cells)])
        for index, header in enumerate(headers)
    ]


def _is_numeric_column(raw: Sequence[Sequence[object]], index: int) -> bool:
    return bool(raw) and all(_is_number(row[index]) or row[index] is None for row in raw)


def _line(values: Sequence[str], widths: Sequence[int], right: Sequence[bool]) -> str:
    parts = [
        text.rjust(widths[i]) if right[i] else text.ljust(widths[i])
        for i, text in enumerate(values)
    ]
    return "  ".join(parts).rstrip()
