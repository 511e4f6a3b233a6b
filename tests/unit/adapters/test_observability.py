"""The observer vocabulary against the metric catalog: one table, every row checked."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from serenity_allocator.adapters.observability import (
    DERIVED_METRICS,
    EVENT_METRICS,
    METRIC_CATALOG,
    EventMetric,
)


@pytest.mark.parametrize(("event_type", "rule"), list(EVENT_METRICS.items()))
def test_every_event_row_names_a_catalog_metric_through_the_events_own_fields(
    event_type: type[object], rule: EventMetric
) -> None:
    # Given one row of the table / Then its metric is in the catalog, its value and dimension
    # are fields of the event, and the row has a dimension exactly when the metric does
    spec = METRIC_CATALOG[rule.metric]
    fields = {field.name for field in dataclasses.fields(event_type)}  # type: ignore[arg-type]
    assert rule.value is None or rule.value in fields
    assert (rule.dimension is None) == (spec.dimension is None)
    assert rule.dimension is None or rule.dimension in fields


@pytest.mark.parametrize(("event_type", "rule"), list(EVENT_METRICS.items()))
def test_a_dimension_field_typed_as_a_literal_names_only_catalog_values(
    event_type: type[object], rule: EventMetric
) -> None:
    # Given a row whose dimension field is a Literal / Then each value it allows is cataloged
    if rule.dimension is None:
        return
    hint = typing.get_type_hints(event_type)[rule.dimension]
    allowed = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()
    assert set(allowed) <= set(METRIC_CATALOG[rule.metric].values)


def test_every_catalog_metric_has_exactly_one_source() -> None:
    # Given the catalog / Then each metric comes from one table row or one derived event, never
    # from two and never from none (what a service emits is the library's own catalog)
    from_rows = [rule.metric for rule in EVENT_METRICS.values()]
    sources = from_rows + list(DERIVED_METRICS)
    assert sorted(sources) == sorted(METRIC_CATALOG)
    assert len(set(sources)) == len(sources)
