"""Poison: messages the worker must refuse, drawn from a seeded or a hypothesis source."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from serenity_allocator.domain.messages import cross_field_problem, parse_request

_T = TypeVar("_T")


class Draws(Protocol):
    """Where the poison generator's choices come from (seeded ``random``, or hypothesis)."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        ...

    def choice(self, options: Sequence[_T]) -> _T:
        """One of ``options``."""
        ...

    def text(self, max_size: int) -> str:
        """Text of at most ``max_size`` characters SQS accepts in a body."""
        ...


_TEXT_ALPHABET = "abcxyzABCXYZ0123456789 _-.:,;!?'\"{}[]()<>/\\\t\n" + "éüßñ漢字дж😀€\u00a0\u2028"


class RandomDraws:
    """:class:`Draws` from a seeded :class:`random.Random` (what the CLI uses)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        return self._rng.randint(low, high)

    def choice(self, options: Sequence[_T]) -> _T:
        """One of ``options``."""
        return self._rng.choice(options)

    def text(self, max_size: int) -> str:
        """Random text over a mixed alphabet (quotes, braces, non-ASCII, emoji)."""
        length = self._rng.randint(0, max_size)
        return "".join(self._rng.choice(_TEXT_ALPHABET) for _ in range(length))


POISON_KINDS = (
    "not-json",
    "truncated-json",
    "json-not-object",
    "missing-field",
    "wrong-type",
    "unknown-field",
    "bad-kind",
    "bad-version",
    "negative-number",
    "blank-or-long-id",
    "group-mismatch",
)


@dataclass(frozen=True)
class PoisonMessage:
    """A message the worker must refuse: it goes to the DLQ with its reason, never to Semrush.

    Attributes:
        kind: Which of :data:`POISON_KINDS` it is.
        poison_id: The workspace id its body names, if any (ids that appear only in poison).
        group_id: Its MessageGroupId (its own, or a valid child's: poison in a busy group).
        body: The raw body.
        dedup_id: Its MessageDeduplicationId.
    """

    kind: str
    poison_id: str
    group_id: str
    body: str
    dedup_id: str


def is_refused_by_worker(group_id: str, body: str) -> bool:
    """True when the worker dead-letters this message: the worker's own validation rule.

    The body must parse as a version-1 request and pass the cross-field rules (its
    ``workspace_id`` equals the MessageGroupId; ``application.allocator.invocation.read_message``).
    """
    from pydantic import ValidationError

    try:
        request = parse_request(body)
    except ValidationError:
        return True
    return cross_field_problem(request, group_id) is not None


def _poison_base(draws: Draws, poison_id: str) -> dict[str, Any]:
    if draws.integer(0, 1):
        return {
            "version": 1,
            "kind": "ensure",
            "request_id": f"{poison_id}-r",
            "workspace_id": poison_id,
            "parent_workspace_id": "px-parent",
            "need": {"projects": draws.integer(0, 2), "prompts": draws.integer(0, 500)},
        }
    return {
        "version": 1,
        "kind": "release",
        "request_id": f"{poison_id}-r",
        "workspace_id": poison_id,
    }


class _Raw(str):
    """A body sent as is, not JSON-encoded (not JSON, truncated JSON)."""


def _not_json(draws: Draws, base: dict[str, Any]) -> Any:
    return _Raw(draws.choice(("<html>", "ensure ", "{", "'")) + draws.text(60))


def _truncated_json(draws: Draws, base: dict[str, Any]) -> Any:
    text = json.dumps(base, ensure_ascii=False)
    return _Raw(text[: draws.integer(1, len(text) - 1)])


def _json_not_object(draws: Draws, base: dict[str, Any]) -> Any:
    return draws.choice(
        ([draws.integer(-9, 9)], draws.text(20), None, draws.integer(-99, 99), True)
    )


_OPTIONAL_FIELDS = ("version", "need")
"""Base fields ``missing-field`` keeps: ``version`` (``bad-version`` spoils it) and ``need``,
which has a default (an ensure without it is valid, refused only off its own group)."""


def _missing_field(draws: Draws, base: dict[str, Any]) -> Any:
    body = dict(base)
    del body[draws.choice([key for key in base if key not in _OPTIONAL_FIELDS])]
    return body


def _wrong_type(draws: Draws, base: dict[str, Any]) -> Any:
    key = draws.choice(sorted(base))
    values = (draws.integer(-5, 5), draws.text(10), None, [1], {"a": 1}, 1.5, True)
    # Only a value of another type than the field's: a drawn text for a text field is no
    # poison (a workspace id "0" is valid, and only its group would refuse it).
    value = draws.choice([v for v in values if type(v) is not type(base[key])])
    return {**base, key: value}


def _unknown_field(draws: Draws, base: dict[str, Any]) -> Any:
    return {**base, draws.choice(("extra", "Kind", "need2", "priority")): draws.text(10)}


def _bad_kind(draws: Draws, base: dict[str, Any]) -> Any:
    kind = draws.text(12)
    # A drawn text may be a kind the contract has ("ensure" was drawn once): never a poison.
    return {**base, "kind": kind + "?" if kind in ("ensure", "release") else kind}


def _bad_version(draws: Draws, base: dict[str, Any]) -> Any:
    return {**base, "version": draws.choice((0, 2, "1", 1.5, None))}


def _negative_number(draws: Draws, base: dict[str, Any]) -> Any:
    if base["kind"] == "ensure":
        return {**base, "need": {**base["need"], "prompts": -draws.integer(1, 1000)}}
    return {**base, "floor": {"projects": -draws.integer(1, 5), "prompts": 0}}


def _blank_or_long_id(draws: Draws, base: dict[str, Any]) -> Any:
    return {**base, "workspace_id": draws.choice(("", "   ", "x" * 129))}


def _group_mismatch(draws: Draws, base: dict[str, Any]) -> Any:
    return dict(base)  # a valid body; its MessageGroupId names another child


_POISON_BODIES: dict[str, Callable[[Draws, dict[str, Any]], Any]] = {
    "not-json": _not_json,
    "truncated-json": _truncated_json,
    "json-not-object": _json_not_object,
    "missing-field": _missing_field,
    "wrong-type": _wrong_type,
    "unknown-field": _unknown_field,
    "bad-kind": _bad_kind,
    "bad-version": _bad_version,
    "negative-number": _negative_number,
    "blank-or-long-id": _blank_or_long_id,
    "group-mismatch": _group_mismatch,
}
"""How each of :data:`POISON_KINDS` spoils a valid body."""


def _poison_body(kind: str, draws: Draws, base: dict[str, Any]) -> str:
    body = _POISON_BODIES[kind](draws, base)
    return str(body) if isinstance(body, _Raw) else json.dumps(body, ensure_ascii=False)


class _DrawnPlan:
    """Kind and placement from the draws (the CLI's: a third in valid children's groups)."""

    def kind(self, draws: Draws, index: int) -> str:
        return draws.choice(POISON_KINDS)

    def in_valid_group(self, draws: Draws, index: int) -> bool:
        return draws.integer(0, 2) == 0


class _EveryKindPlan:
    """Kind and placement by position: message ``n`` is kind ``n`` mod 11.

    The rounds of 11 alternate between the poison's own groups (even) and valid children's (odd).
    """

    def kind(self, draws: Draws, index: int) -> str:
        return POISON_KINDS[index % len(POISON_KINDS)]

    def in_valid_group(self, draws: Draws, index: int) -> bool:
        return (index // len(POISON_KINDS)) % 2 == 1


def _group(kind: str, poison_id: str, valid_group: str | None) -> str:
    if valid_group is not None:
        return valid_group
    return f"{poison_id}-elsewhere" if kind == "group-mismatch" else poison_id


def _refused_as_drawn(kind: str, poison_id: str, group: str, body: str) -> bool:
    # Refused in its own group too, or it is a group mismatch drawn under another name.
    spoiled = kind == "group-mismatch" or is_refused_by_worker(poison_id, body)
    return spoiled and is_refused_by_worker(group, body)


def poison_messages(
    draws: Draws, count: int, valid_groups: Sequence[str], *, every_kind: bool = False
) -> list[PoisonMessage]:
    """``count`` messages the worker refuses, of every kind, some in valid children's groups.

    A draw that happens to be a valid request is dropped (checked with
    :func:`is_refused_by_worker`), and so is one that only its group makes invalid unless it is
    a ``group-mismatch``; another one is drawn (of the same kind and placement when
    ``every_kind``).

    Args:
        draws: The source of every choice.
        count: How many messages.
        valid_groups: The valid children's groups poison may be put in.
        every_kind: Cycle through :data:`POISON_KINDS` in order, the first 11 messages in their
            own groups, the next 11 in valid children's groups, and so on: from 22 messages on,
            every kind at least twice and in both placements, whatever the draws. The draws
            still choose each body, its base and which valid child's group. False (the CLI's):
            the draws choose kinds and placements too.

    Raises:
        RuntimeError: The draws keep producing valid requests.
    """
    plan = _EveryKindPlan() if every_kind else _DrawnPlan()
    messages: list[PoisonMessage] = []
    for attempt in range(count * 20):
        if len(messages) == count:
            break
        kind = plan.kind(draws, len(messages))
        poison_id = f"px-{attempt:04d}"
        base = _poison_base(draws, poison_id)
        in_valid_group = bool(valid_groups) and plan.in_valid_group(draws, len(messages))
        group = _group(kind, poison_id, draws.choice(valid_groups) if in_valid_group else None)
        body = _poison_body(kind, draws, base) or " "
        if _refused_as_drawn(kind, poison_id, group, body):
            messages.append(PoisonMessage(kind, poison_id, group, body, f"poison-{attempt}"))
    if len(messages) < count:
        raise RuntimeError("the draws keep producing valid requests")
    return messages
