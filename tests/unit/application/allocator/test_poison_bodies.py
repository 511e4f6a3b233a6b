"""The harness's poison generator, kind by kind: each body is refused for what its kind spoils.

The e2e poison test sends one seeded body per kind and placement; here hypothesis explores each
kind's bodies, where an example costs no stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from serenity_allocator.application.allocator.invocation import InboundMessage, read_message
from serenity_tools.verification.harness.poison_bodies import POISON_KINDS, poison_messages

_T = TypeVar("_T")

VALID_GROUPS = ["c0001", "c0002", "c0003"]

REFUSED_ON: dict[str, frozenset[str]] = {
    "not-json": frozenset({"body"}),
    "truncated-json": frozenset({"body"}),
    "json-not-object": frozenset({"body"}),
    "missing-field": frozenset({"kind", "request_id", "workspace_id", "parent_workspace_id"}),
    "wrong-type": frozenset(
        {"version", "kind", "request_id", "workspace_id", "parent_workspace_id", "need"}
    ),
    "unknown-field": frozenset({"extra", "Kind", "need2", "priority"}),
    "bad-kind": frozenset({"kind"}),
    "bad-version": frozenset({"version"}),
    "negative-number": frozenset({"need.prompts", "floor.projects"}),
    "blank-or-long-id": frozenset({"workspace_id"}),
    "group-mismatch": frozenset({"MessageGroupId"}),
}
"""The field the worker's reason names first, by kind: what that kind of poison spoils."""


class HypothesisDraws:
    """The poison generator's choices, drawn by hypothesis."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def integer(self, low: int, high: int) -> int:
        return self._data.draw(st.integers(low, high))

    def choice(self, options: Sequence[_T]) -> _T:
        return self._data.draw(st.sampled_from(list(options)))

    def text(self, max_size: int) -> str:
        # What SQS accepts in a body: no surrogates, no control characters.
        alphabet = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
        return self._data.draw(st.text(alphabet, max_size=max_size))


def _names_one_of(reason: str, fields: frozenset[str]) -> bool:
    first = reason.split(":", maxsplit=1)[0]
    return any(first == field or first.startswith(f"{field}.") for field in fields)


def test_every_kind_has_the_field_it_spoils() -> None:
    assert set(REFUSED_ON) == set(POISON_KINDS)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_each_kind_of_poison_is_refused_by_the_worker_for_what_it_spoils(
    data: st.DataObject,
) -> None:
    # Given two rounds of every kind, the first in the poison's own groups, the second in
    # valid children's, every body drawn by hypothesis
    poison = poison_messages(HypothesisDraws(data), 22, VALID_GROUPS, every_kind=True)

    # Then each kind is there twice, once in each placement
    assert [p.kind for p in poison] == [*POISON_KINDS, *POISON_KINDS]
    assert all(p.group_id not in VALID_GROUPS for p in poison[:11])
    assert all(p.group_id in VALID_GROUPS for p in poison[11:])
    # And the worker refuses each, naming first the field its kind spoils (a body refused only
    # because it sits in another child's group is a group mismatch, whatever it was drawn as)
    for message in poison:
        read = read_message(InboundMessage("m-1", message.group_id, message.body))
        assert read.request is None, message
        reason = read.invalid_reason or ""
        assert _names_one_of(reason, REFUSED_ON[message.kind]), (message, reason)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_refused_body_with_a_readable_request_id_is_answered_under_it(
    data: st.DataObject,
) -> None:
    # Given every kind once, in the poison's own groups, drawn by hypothesis
    poison = poison_messages(HypothesisDraws(data), 11, VALID_GROUPS, every_kind=True)

    # Then a body whose request id the worker can read is answered invalid under that id (its
    # kind unknown when the body's is not ensure or release), and the others get no answer
    for message in poison:
        outcome = read_message(InboundMessage("m-1", message.group_id, message.body))
        answer = outcome.invalid_outcome
        if message.kind in ("not-json", "truncated-json", "json-not-object"):
            assert answer is None, message
        elif message.kind == "bad-kind":
            assert answer is not None, message
            assert (answer.request_id, answer.kind) == (f"{message.poison_id}-r", "unknown")
        if answer is not None:
            assert answer.status == "invalid"
            assert answer.request_id == f"{message.poison_id}-r"
