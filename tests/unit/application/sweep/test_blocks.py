"""The sweep sizes its previews and its default floor with the configured blocks, not defaults."""

from __future__ import annotations

import dataclasses

from serenity_allocator.application.sweep.run_batch import run_sweep_batch
from serenity_allocator.domain.model import Blocks, Totals
from tests.fakes import EnqueuedRelease, InMemoryGateway
from tests.unit.application.sweep.sweep_rig import MASTER, POOL, RUN, Rig, sweep_request

# Not the default (1 project, 100 prompts): a preview that ignored them would size by 100.
WIDE_BLOCKS = Blocks(projects=2, prompts=250)


def _family() -> InMemoryGateway:
    gateway = InMemoryGateway()
    gateway.add_master(MASTER, total=POOL)
    # uses 260 prompts of 1000: 500 with 250-blocks (300 with the default 100-blocks)
    gateway.add_child(
        "wide",
        MASTER,
        total=Totals(projects=5, prompts=1_000),
        used=Totals(projects=1, prompts=260),
    )
    # at 2 projects, 250 prompts: the wide floor itself (the default floor would lower it)
    gateway.add_child("at-floor", MASTER, total=Totals(projects=2, prompts=250))
    return gateway


def test_run_sweep_batch_dry_run_previews_with_the_configured_blocks() -> None:
    # Given a sweep configured with 2-project, 250-prompt blocks
    rig = Rig(_family())

    # When it runs dry with no floor in the request
    env = dataclasses.replace(rig.env(), blocks=WIDE_BLOCKS)
    result = run_sweep_batch(sweep_request(dry_run=True), RUN, env)

    # Then each preview rounds up to those blocks and keeps their floor of one block each
    previews = {
        item.workspace_id: (item.outcome, item.target, item.units_returned) for item in result.items
    }
    assert previews == {
        "wide": ("would-release", Totals(projects=2, prompts=500), Totals(projects=3, prompts=500)),
        "at-floor": (
            "nothing-to-release",
            Totals(projects=2, prompts=250),
            Totals(projects=0, prompts=0),
        ),
    }
    assert rig.gateway.transfers == []


def test_run_sweep_batch_real_run_enqueues_the_configured_blocks_as_floor() -> None:
    # Given the same sweep, real this time, with no floor in the request
    rig = Rig(_family())

    # When it runs
    env = dataclasses.replace(rig.env(), blocks=WIDE_BLOCKS)
    result = run_sweep_batch(sweep_request(dry_run=False), RUN, env)

    # Then the one child with surplus gets a release floored at one configured block each
    assert [(item.workspace_id, item.outcome) for item in result.items] == [
        ("wide", "enqueued"),
        ("at-floor", "nothing-to-release"),
    ]
    assert rig.enqueuer.releases == [
        EnqueuedRelease("wide", Totals(projects=2, prompts=250), "sweep", RUN, f"{RUN}.wide")
    ]
