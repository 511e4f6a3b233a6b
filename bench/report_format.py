"""Cell and prose formatting shared by the generated benchmark pages."""

from __future__ import annotations

from typing import Any

YES, NO = "yes", "**no**"


def met_cell(flag: bool | None) -> str:
    """A table's met column: yes, **no**, or n/a."""
    return "n/a" if flag is None else (YES if flag else NO)


def met_word(flag: bool | None) -> str:
    """Met or not, for prose inside bold text."""
    return "n/a" if flag is None else ("met" if flag else "NOT met")


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal, or n/a."""
    return "n/a" if value is None else f"{100.0 * value:.1f} %"


def measured(results: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The section's results when it ran without error, else None."""
    section = results.get(key)
    if isinstance(section, dict) and "error" not in section and "skipped" not in section:
        return section
    return None


def not_measured(results: dict[str, Any], key: str) -> str:
    """The line that stands in for a section that did not run, with the reason."""
    section = results.get(key) or {}
    reason = section.get("error") or section.get("skipped") or "not run"
    return f"_Not measured in this run: {reason}_\n"


def tool_file_count(package: dict[str, Any]) -> str:
    """How many tool files the artifact holds, or why that is unknown."""
    # Results from before the tools moved out of src/ carry no such count.
    files = package.get("tool_files_in_artifact")
    return "not measured (re-run the package benchmark)" if files is None else str(len(files))
