"""What the client sends, checked against the vendored swagger (with our corrections).

The bodies and routes are captured from the simulator's call log, i.e. exactly what went over the
wire. Skipped when ../shared/contract is absent (the helpers in :mod:`tests.contract.swagger`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from serenity_allocator.adapters.semrush import SemrushClient, StaticTokenProvider
from serenity_allocator.domain.model import Totals
from serenity_tools.standins.simulator import SimulatorServer, start_simulator
from tests.contract.swagger import (
    load_spec,
    operation_path,
    request_body_schema,
    validate_schema,
)

SEED: list[dict[str, Any]] = [
    {
        "id": "m1",
        "title": "Org",
        "parent_id": None,
        "ai": {"projects": {"used": 0, "total": 100}, "prompts": {"used": 0, "total": 20000}},
    },
    {
        "id": "c1",
        "title": "Brand",
        "parent_id": "m1",
        "ai": {"projects": {"used": 1, "total": 2}, "prompts": {"used": 150, "total": 200}},
    },
]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    with start_simulator() as server:
        yield server


@pytest.fixture
def calls(sim: SimulatorServer) -> list[dict[str, Any]]:
    """Every operation the client offers, once, as the simulator logged it."""
    sim.reset()
    sim.seed(SEED)
    with SemrushClient(sim.origin, StaticTokenProvider("tok-contract")) as client:
        client.read_resources("c1")
        client.transfer("c1", Totals(projects=3, prompts=300))
        client.read_status("c1")
        client.list_family("m1")
        client.create_child("m1", "Carved", Totals(projects=1, prompts=100))
        client.create_child("m1", "Bare")
    logged = sim.calls()
    assert [call["status"] for call in logged] == [200] * 6
    return logged


def _posts(calls: list[dict[str, Any]], op: str) -> list[dict[str, Any]]:
    return [call for call in calls if call["op"] == op]


def test_client_routes_exist_in_the_swagger(calls: list[dict[str, Any]]) -> None:
    # Given the calls the client made for its five operations
    spec = load_spec()

    # When each concrete path is matched to a swagger template
    # Then every route and method is one the swagger documents
    for call in calls:
        template = operation_path(call["path"])
        assert template is not None, call["path"]
        assert call["method"].lower() in spec["paths"][template], (call["method"], template)


def test_client_transfer_body_matches_the_swagger_form(calls: list[dict[str, Any]]) -> None:
    # Given the transfer the client sent
    (transfer,) = _posts(calls, "transfer")

    # When it is validated against the transfer operation's body schema
    schema = request_body_schema(transfer["path"], "POST")

    # Then it is valid, and carries both AI dimensions
    validate_schema(transfer["body"], schema)
    assert set(transfer["body"]["resources"]["ai"]) == {"projects", "prompts"}


def test_client_create_child_bodies_match_the_swagger_form(calls: list[dict[str, Any]]) -> None:
    # Given both creations (with initial totals and without)
    created = _posts(calls, "create_child")
    assert len(created) == 2

    # When each is validated against the create-child operation's body schema
    # Then both are valid; the bare one still sends the resources key the raw swagger requires
    for call in created:
        validate_schema(call["body"], request_body_schema(call["path"], "POST"))
        assert "resources" in call["body"]


def test_client_contract_schemas_reject_a_wrong_body(calls: list[dict[str, Any]]) -> None:
    # Given the schemas the bodies were validated against
    (transfer,) = _posts(calls, "transfer")
    schema = request_body_schema(transfer["path"], "POST")

    # When a body with a string count is validated
    # Then it is refused (the schema bites; the passing tests above are not vacuous)
    with pytest.raises(jsonschema.ValidationError):
        validate_schema({"resources": {"ai": {"projects": "3", "prompts": 300}}}, schema)
