"""The domain classifies the RAW upstream answer; only the logged form of an error is redacted.

Over real HTTP to the simulator: a token that is a substring of the upstream's message (here a
one-letter token) must not turn a terminal pool exhaustion into an unrecognisable 422.
"""

from __future__ import annotations

import pytest

from serenity_allocator.adapters.semrush import (
    SemrushClient,
    SemrushClientConfig,
    StaticTokenProvider,
)
from serenity_allocator.domain.errors import OrgPoolExhaustedError, UpstreamError, is_pool_exhausted
from serenity_allocator.domain.model import Totals
from serenity_allocator.domain.transfer import (
    FAIL_FAST,
    TransferContext,
    TransferTarget,
    apply_transfer,
)
from serenity_tools.standins.simulator import SimulatorServer

SHORT_TOKEN = "i"  # occurs in "insufficient available units in subscription"

FAMILY = [
    {"id": "m1", "ai": {"projects": {"used": 0, "total": 1}, "prompts": {"used": 0, "total": 0}}},
    {"id": "c1", "parent_id": "m1"},
]


@pytest.fixture
def client(sim: SimulatorServer) -> SemrushClient:
    sim.seed(FAMILY)
    return SemrushClient(
        sim.origin, StaticTokenProvider(SHORT_TOKEN), config=SemrushClientConfig(max_retries=0)
    )


def test_semrush_client_error_keeps_the_raw_body_for_classification_with_a_short_token(
    client: SemrushClient,
) -> None:
    # Given a one-letter token that occurs in the upstream's pool-exhaustion message
    # When a transfer beyond the pool is refused
    with pytest.raises(UpstreamError) as raised:
        client.transfer("c1", Totals(projects=5, prompts=0))

    # Then the raw body still classifies as pool exhaustion
    assert raised.value.status == 422
    assert raised.value.body == '{"message":"insufficient available units in subscription"}'
    assert is_pool_exhausted(raised.value.status, raised.value.body)
    # And the string form (what is logged) is the redacted one
    assert str(raised.value) == (
        'transfer: upstream answered 422: {"message":"***nsuff***c***ent ava***lable un***ts '
        '***n subscr***pt***on"}'
    )


def test_apply_transfer_short_token_pool_exhaustion_stays_terminal(
    client: SemrushClient,
) -> None:
    # Given the same one-letter token
    ctx = TransferContext(clock=lambda: 0.0, sleep=lambda _s: None)

    # When the domain applies a transfer the pool cannot cover
    # Then it is the terminal OrgPoolExhaustedError, not a retried upstream 422
    with pytest.raises(OrgPoolExhaustedError):
        apply_transfer(client, TransferTarget("c1", Totals(projects=5, prompts=0)), FAIL_FAST, ctx)
