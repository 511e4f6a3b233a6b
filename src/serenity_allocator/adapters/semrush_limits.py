"""The Semrush client's retry budget.

Apart from the client, so the settings read it without importing httpx (cold start).
"""

from __future__ import annotations

MAX_RETRIES = 2
"""Retries on 429, 5xx and transport errors. The one place it is written
(``SEMRUSH_MAX_RETRIES``).

With the per-request timeout (``domain.transfer.CALL_BUDGET_S``, 15 s) and no deadline, one call
takes up to 3 x 15 s plus, per retry, the backoff (0.5 s, 1 s) or a ``Retry-After`` of up to
10 s: 65 s, more than the Allocator's 60 s timeout (and 15 s more for the one retry after a
401). What bounds a call is the invocation's deadline (``SemrushClient.limit_time``, which both
handlers set to at most the remaining time less ``SAFETY_MARGIN_MS``): no attempt starts past
it, each attempt's timeout is cut to the time left, and a retry that would not leave time for a
request is not taken."""
