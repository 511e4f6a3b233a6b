"""The Semrush client's retry budget.

Apart from the client, so the settings read it without importing httpx (cold start).
"""

from __future__ import annotations

MAX_RETRIES = 2
"""Retries on 429, 5xx and transport errors. With the per-request timeout
(``domain.transfer.CALL_BUDGET_S``, 15 s) one call takes at most 3 x 15 s + 1.5 s of backoff,
inside the Allocator's 60 s timeout. The one place it is written (``SEMRUSH_MAX_RETRIES``)."""
