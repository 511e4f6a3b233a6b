"""Pool early warning: drain-rate estimate and once-per-interval low-pool warnings."""

from __future__ import annotations

import pytest

from serenity_allocator.domain.container_memory import PoolWatch
from serenity_allocator.domain.model import AiResources, DimensionUsage, Totals
from tests.fakes import FakeClock

POOL_A = "master-a"
POOL_B = "master-b"
INTERVAL_S = 900.0


def _pool(
    prompts_free: int,
    prompts_total: int = 10_000,
    projects_free: int = 100,
    projects_total: int = 100,
) -> AiResources:
    return AiResources(
        projects=DimensionUsage(used=projects_total - projects_free, total=projects_total),
        prompts=DimensionUsage(used=prompts_total - prompts_free, total=prompts_total),
    )


def test_observe_no_warning_while_free_ratio_at_or_above_threshold() -> None:
    # Given a threshold of 10 %
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)

    # When pools at 50 % and exactly 10 % free are read / Then nothing is due
    assert watch.observe(POOL_A, _pool(prompts_free=5_000)) is None
    assert watch.observe(POOL_A, _pool(prompts_free=1_000)) is None


def test_observe_warns_when_free_ratio_under_threshold() -> None:
    # Given a threshold of 10 %
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)

    # When a pool with 5 % of its prompts free is read
    warning = watch.observe(POOL_A, _pool(prompts_free=500))

    # Then one warning names the pool, the dimension and the numbers
    assert warning is not None
    assert warning.parent_workspace_id == POOL_A
    assert warning.dim == "prompts"
    assert (warning.free, warning.total, warning.free_ratio) == (500, 10_000, 0.05)
    # ... and with a single read there is no drain estimate yet
    assert warning.drain_units_per_hour is None
    assert warning.projected_seconds_to_exhaustion is None


def test_observe_warns_once_per_pool_per_interval_not_per_read() -> None:
    # Given a low pool read many times within one interval
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.1, interval_s=INTERVAL_S)
    warnings = []
    for _ in range(5):
        warnings.append(watch.observe(POOL_A, _pool(prompts_free=500)))
        clock.advance(INTERVAL_S / 10)

    # When counted / Then only the first read warned
    assert [w is not None for w in warnings] == [True, False, False, False, False]


def test_observe_warns_again_after_the_interval() -> None:
    # Given a warning already given
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.1, interval_s=INTERVAL_S)
    assert watch.observe(POOL_A, _pool(prompts_free=500)) is not None

    # When the pool is read just before and then at the end of the interval
    clock.advance(INTERVAL_S - 1)
    early = watch.observe(POOL_A, _pool(prompts_free=490))
    clock.advance(1)
    due = watch.observe(POOL_A, _pool(prompts_free=480))

    # Then it warns again only once the interval has passed
    assert early is None
    assert due is not None and due.free == 480


def test_observe_intervals_are_per_pool() -> None:
    # Given two low pools read at the same moment
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)

    # When each is read twice / Then each warns once, independently
    results = [
        watch.observe(pool, _pool(prompts_free=100)) for pool in (POOL_A, POOL_B, POOL_A, POOL_B)
    ]
    assert [r.parent_workspace_id if r else None for r in results] == [POOL_A, POOL_B, None, None]


def test_observe_reports_the_lowest_dimension() -> None:
    # Given a pool low in both dimensions, projects lower
    watch = PoolWatch(FakeClock(), threshold=0.2, interval_s=INTERVAL_S)

    # When read
    warning = watch.observe(POOL_A, _pool(prompts_free=1_500, projects_free=5))

    # Then the warning is about the worse dimension
    assert warning is not None
    assert (warning.dim, warning.free_ratio) == ("projects", 0.05)


def test_observe_skips_a_dimension_with_zero_total() -> None:
    # Given a pool with no projects at all and plenty of prompts
    watch = PoolWatch(FakeClock(), threshold=0.5, interval_s=INTERVAL_S)

    # When read / Then an empty dimension has no ratio and does not warn
    assert (
        watch.observe(POOL_A, _pool(prompts_free=9_000, projects_free=0, projects_total=0)) is None
    )


def test_observe_estimates_drain_rate_and_time_to_exhaustion() -> None:
    # Given a low pool losing 600 prompt units per minute (interval 0: warn on every read)
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.2, interval_s=0)
    watch.observe(POOL_A, _pool(prompts_free=1_800))

    # When read again a minute later
    clock.advance(60)
    warning = watch.observe(POOL_A, _pool(prompts_free=1_200))

    # Then the rate is 10 units/s (36 000/h) and 1 200 units last 120 s
    assert warning is not None
    assert warning.drain_units_per_hour == pytest.approx(36_000)
    assert warning.projected_seconds_to_exhaustion == pytest.approx(120)


def test_observe_smooths_the_drain_rate_over_reads() -> None:
    # Given a first rate sample of 10 units/s
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.5, interval_s=0)
    watch.observe(POOL_A, _pool(prompts_free=2_000))
    clock.advance(10)
    watch.observe(POOL_A, _pool(prompts_free=1_900))

    # When the next sample is 20 units/s
    clock.advance(10)
    warning = watch.observe(POOL_A, _pool(prompts_free=1_700))

    # Then the estimate is the moving average 0.3 x 20 + 0.7 x 10 = 13 units/s
    assert warning is not None
    assert warning.drain_units_per_hour == pytest.approx(13 * 3600)
    assert warning.projected_seconds_to_exhaustion == pytest.approx(round(1_700 / 13, 1))


def test_observe_no_exhaustion_projection_when_pool_is_not_draining() -> None:
    # Given a low pool that gained units between reads (a release came back)
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.2, interval_s=0)
    watch.observe(POOL_A, _pool(prompts_free=500))
    clock.advance(60)

    # When read again
    warning = watch.observe(POOL_A, _pool(prompts_free=800))

    # Then the rate is negative and no time to exhaustion is projected
    assert warning is not None
    assert warning.drain_units_per_hour is not None and warning.drain_units_per_hour < 0
    assert warning.projected_seconds_to_exhaustion is None


def test_observe_rate_is_per_pool() -> None:
    # Given pool A draining and pool B read for the first time
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.2, interval_s=0)
    watch.observe(POOL_A, _pool(prompts_free=1_800))
    clock.advance(60)
    watch.observe(POOL_A, _pool(prompts_free=1_200))

    # When pool B is read / Then it has no estimate of its own yet
    warning = watch.observe(POOL_B, _pool(prompts_free=1_000))
    assert warning is not None
    assert warning.drain_units_per_hour is None


def test_observe_warns_on_a_dimension_of_one_unit_with_none_free() -> None:
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)

    warning = watch.observe(POOL_A, _pool(prompts_free=5_000, projects_free=0, projects_total=1))

    assert warning is not None
    assert (warning.dim, warning.free, warning.total, warning.free_ratio) == ("projects", 0, 1, 0.0)


def test_observe_reads_the_prompts_past_a_projects_dimension_of_zero_total() -> None:
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)

    warning = watch.observe(POOL_A, _pool(prompts_free=500, projects_free=0, projects_total=0))

    assert warning is not None
    assert (warning.dim, warning.free) == ("prompts", 500)


def test_observe_names_the_first_dimension_when_both_are_equally_low() -> None:
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)

    warning = watch.observe(POOL_A, _pool(prompts_free=500, projects_free=5))

    assert warning is not None
    assert (warning.dim, warning.free, warning.free_ratio) == ("projects", 5, 0.05)


def test_observe_rounds_the_ratio_to_four_places_and_the_hourly_drain_to_two() -> None:
    # Given a pool of 3 prompts read twice 7 s apart, one prompt drained in between
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.5, interval_s=INTERVAL_S)
    assert watch.observe(POOL_A, _pool(prompts_free=2, prompts_total=3)) is None
    clock.advance(7)

    warning = watch.observe(POOL_A, _pool(prompts_free=1, prompts_total=3))

    # Then 1/3 is 0.3333, 3600/7 per hour is 514.29, and 1 prompt at 1/7 a second lasts 7 s
    assert warning is not None
    assert warning.free_ratio == 0.3333
    assert warning.drain_units_per_hour == 514.29
    assert warning.projected_seconds_to_exhaustion == 7.0


def test_observe_takes_a_drain_sample_from_reads_half_a_second_apart() -> None:
    # Given two reads 0.5 s apart (one prompt drained), then none drained for the interval
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.1, interval_s=INTERVAL_S)
    watch.observe(POOL_A, _pool(prompts_free=501))
    clock.advance(0.5)
    watch.observe(POOL_A, _pool(prompts_free=500))  # 2 prompts a second (warned)
    clock.advance(INTERVAL_S)

    warning = watch.observe(POOL_A, _pool(prompts_free=500))  # nothing drained for 900 s

    # Then the 0.5 s sample counted: the smoothed rate is 0.3 * 0 + 0.7 * 2 = 1.4 a second
    assert warning is not None
    assert warning.drain_units_per_hour == 5040.0
    assert warning.projected_seconds_to_exhaustion == round(500 / 1.4, 1)


def test_observe_projects_no_time_left_for_a_drained_pool() -> None:
    clock = FakeClock()
    watch = PoolWatch(clock, threshold=0.1, interval_s=INTERVAL_S)
    assert watch.observe(POOL_A, _pool(prompts_free=10, prompts_total=20)) is None
    clock.advance(10)

    warning = watch.observe(POOL_A, _pool(prompts_free=0, prompts_total=20))

    assert warning is not None
    assert warning.projected_seconds_to_exhaustion == 0.0


def test_last_free_is_the_parents_own_last_read_with_an_overdrawn_dimension_as_zero() -> None:
    # Given two pools read, one overdrawn in prompts (more used than it holds)
    watch = PoolWatch(FakeClock(), threshold=0.1, interval_s=INTERVAL_S)
    watch.observe(POOL_A, _pool(prompts_free=-5, projects_free=7))
    watch.observe(POOL_B, _pool(prompts_free=4_000))

    # Then each parent's free units are its own, none negative; an unread parent has none
    assert watch.last_free(POOL_A) == Totals(projects=7, prompts=0)
    assert watch.last_free(POOL_B) == Totals(projects=100, prompts=4_000)
    assert watch.last_free("master-never-read") is None
