"""Classifiers on upstream answers, all in one place.

The upstream uses one status (422) for two meanings that only the message text tells apart
(semrush-user-manager.md, "The two 422s share a status code"), and disguises a metered-quota
rejection as a 405 on the Project Engine gateway. Matching on text is the upstream's contract
here, so it is done in this module and nowhere else: always status AND text.
"""

from __future__ import annotations

import re

_POOL_EXHAUSTED = "insufficient available units"
_NOT_READY = "workspace not ready"
_METERED_QUOTA = re.compile(r"quota|allocation exhausted", re.IGNORECASE)


def is_pool_exhausted(status: int, body: str) -> bool:
    """422 ``insufficient available units in subscription``: terminal exhaustion."""
    return status == 422 and _POOL_EXHAUSTED in body.lower()


def is_not_ready(status: int, body: str) -> bool:
    """422 ``workspace not ready``: the child is settling; transient."""
    return status == 422 and _NOT_READY in body.lower()


def is_metered_quota(status: int, body: str) -> bool:
    """A disguised quota rejection from a metered write: 405 whose body mentions quota.

    A plain 405 (method not allowed) is not one.
    """
    return status == 405 and bool(_METERED_QUOTA.search(body))


def is_rate_limited(status: int, body: str = "") -> bool:
    """429 from the upstream's rate limiter."""
    return status == 429


def is_gone(status: int, body: str = "") -> bool:
    """404: the resource does not exist (any more)."""
    return status == 404


def is_server_error(status: int, body: str = "") -> bool:
    """5xx: the upstream failed; a retry may succeed."""
    return 500 <= status <= 599
