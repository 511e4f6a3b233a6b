"""``needsReauth`` dead letters that a lost IMS exchange answer explains (ADR 0016's safe side).

The simulator logs an exchange of a spent promise token whose rolled successor was never
presented since as ``"answer_lost": true`` with its user: IMS processed the earlier exchange,
and its answer never reached the request's credential record (lost in transit, or lost with a
consumer killed before it stored the rolled token). The worker then rightly ends the request
``failed / needsReauth`` in the DLQ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from serenity_tools.standins.stack import DeadLetter

LOST_ANSWER = (
    "needsReauth after IMS processed its exchange and the answer never reached the record "
    "(ADR 0016: the safe side)"
)


def explain_lost_answers(
    letters: Sequence[DeadLetter],
    owners: Mapping[str, str],
    ims_calls: Sequence[Mapping[str, Any]],
) -> tuple[list[DeadLetter], list[str]]:
    """Split off the ``needsReauth`` dead letters a lost exchange answer explains.

    One per exchange the simulator logged ``answer_lost`` for the request's user: that promise
    was spent by an exchange whose answer its caller never got. Every other letter is kept.
    """
    lost = Counter(
        str(c.get("user"))
        for c in ims_calls
        if c.get("op") == "ims_exchange" and c.get("answer_lost") is True
    )
    kept: list[DeadLetter] = []
    explained: list[str] = []
    for letter in letters:
        user = owners.get(letter.request_id or "")
        if letter.reason == "needsReauth" and user is not None and lost[user] > 0:
            lost[user] -= 1
            explained.append(f"{letter.request_id}: {LOST_ANSWER}")
        else:
            kept.append(letter)
    return kept, explained
