"""Classifiers on upstream answers, all in one place.

The upstream uses one status (422) for two meanings that only the message text tells apart
(semrush-user-manager.md, "The two 422s share a status code"), and disguises a metered-quota
rejection as a 405 on the Project Engine gateway. Matching on text is the upstream's contract
for the 422s, so it is done in this module and nowhere else: always status AND text. The 405 is
told apart by the SHAPE of its body instead ("Metered writes happen elsewhere").

Every classifier reads the RAW upstream body: redaction is for what is logged or stored, and a
redacted body may no longer say what it said (a short token can be a substring of the text).
"""

from __future__ import annotations

import json

QUOTA_SHAPED_STATUS = 405
"""The status the write gate disguises its quota refusal as (its body's shape tells them apart)."""

_POOL_EXHAUSTED = "insufficient available units"
_NOT_READY = "workspace not ready"


def is_pool_exhausted(status: int, body: str) -> bool:
    """422 ``insufficient available units in subscription``: terminal exhaustion."""
    return status == 422 and _POOL_EXHAUSTED in body.lower()


def is_not_ready(status: int, body: str) -> bool:
    """422 ``workspace not ready``: the child is settling; transient."""
    return status == 422 and _NOT_READY in body.lower()


def is_metered_quota(status: int, body: str) -> bool:
    """A disguised quota rejection from a metered write, recognised by shape.

    Live, the refusal is a bare nginx ``text/html`` page with no quota wording, while a genuine
    Method-Not-Allowed always comes back as JSON. So: status 405 AND a non-empty body that is
    not a JSON object or array. Words are never matched (a JSON 405 saying "quota" is a real
    method error); an empty body carries no signal.

    Args:
        status: The HTTP status of the write.
        body: The raw response body text (never a redacted copy).
    """
    return status == QUOTA_SHAPED_STATUS and bool(body.strip()) and not _is_json_container(body)


def is_rate_limited(status: int, body: str = "") -> bool:
    """429 from the upstream's rate limiter."""
    return status == 429


def _is_json_container(body: str) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    except RecursionError:
        # Nested deeper than the parser recurses: only a body opening an object or array gets
        # here, so it is JSON-shaped (not the nginx page), and no further work is spent on it.
        return body.lstrip()[:1] in ("[", "{")
    return isinstance(parsed, dict | list)
