"""One way to say what is wrong with an input: every field at fault, never its value."""

from __future__ import annotations

from collections.abc import Collection

from pydantic import ValidationError


def not_a_dot_segment(value: str) -> str:
    """Refuse ``.`` and ``..``: an id used in a path or key must never name a directory step.

    For an ``AfterValidator`` on id fields, so the refusal is a ``ValidationError`` naming the
    field, not a later ``ValueError`` from the store that builds the key.
    """
    if value in (".", ".."):
        raise ValueError("must not be '.' or '..'")
    return value


def describe_validation_error(
    exc: ValidationError, *, whole: str = "document", skip: Collection[str] = ()
) -> str:
    """Every problem as ``field.path: message``, joined with ``; `` (values never quoted).

    Args:
        exc: The pydantic error.
        whole: The name of the input itself, for a problem with no field path (``body``,
            ``environment``...); input that is not JSON at all is reported on it alone.
        skip: Leading path parts that add nothing (a discriminated union's tags).
    """
    problems = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        if err["type"] == "json_invalid":
            return f"{whole}: not valid JSON ({err['msg']})"
        loc = [str(part) for part in err["loc"]]
        if loc and loc[0] in skip:
            loc = loc[1:]
        problems.append(f"{'.'.join(loc) or whole}: {err['msg']}")
    return "; ".join(problems)
