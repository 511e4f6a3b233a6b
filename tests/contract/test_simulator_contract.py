"""The simulator's answers validate against the vendored swagger, corrected by CR2-CR4.

The simulator is what every client, integration and benchmark test talks to, so the shapes it
serves must be shapes the live API serves: the swagger where it is right, the doc where the
swagger is wrong (status is one object, transfer answers the workspace).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from serenity_tools.standins.simulator import SimulatorServer, start_simulator
from tests.contract import swagger

TOKEN = "contract-token"
MASTER = "master"

RESOURCES_PATH = "/v1/workspaces/{id}/resources"
TRANSFER_PATH = "/v2/workspaces/{id}/resources/transfer"
STATUS_PATH = "/v1/workspaces/{id}/status"
FAMILY_PATH = "/v1/workspaces/{id}/family"
CHILD_PATH = "/v2/workspaces/{id}/child"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorServer]:
    if not swagger.is_available():
        pytest.skip("vendored swagger not found")
    with start_simulator() as server:
        yield server


@pytest.fixture
def api(sim: SimulatorServer) -> Iterator[httpx.Client]:
    sim.reset()
    sim.seed(
        [
            {
                "id": MASTER,
                "title": "Org",
                "limits_enabled": False,
                "ai": {
                    "projects": {"used": 1, "drafted": 0, "total": 10},
                    "prompts": {"used": 100, "drafted": 20, "total": 1000},
                    "weekly_prompts": {"used": 0, "total": 70},
                },
            },
            {"id": "c1", "title": "Brand 1", "parent_id": MASTER},
            {"id": "g1", "title": "Sub-brand", "parent_id": "c1", "status": "error"},
        ]
    )
    with httpx.Client(
        base_url=sim.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        yield client


def assert_conforms(instance: Any, schema: dict[str, Any]) -> None:
    swagger.validate_schema(instance, schema)
    assert swagger.undeclared_properties(instance, schema) == []


def test_simulator_contract_read_resources_matches_new_workspace_resources(
    api: httpx.Client,
) -> None:
    # Given a seeded family / When the master's resources are read
    response = api.get(f"/v1/workspaces/{MASTER}/resources")

    # Then the body validates against the swagger's 200 schema, with no invented fields
    assert response.status_code == 200
    assert_conforms(response.json(), swagger.response_schema(RESOURCES_PATH, "get", 200))


def test_simulator_contract_transfer_matches_workspace_response_per_cr4(
    api: httpx.Client,
) -> None:
    # Given a transfer body that validates against the swagger's request form
    body = {"resources": {"ai": {"projects": 2, "prompts": 200}}}
    swagger.validate_schema(body, swagger.request_body_schema(TRANSFER_PATH, "post"))

    # When it is posted
    response = api.post("/v2/workspaces/c1/resources/transfer", json=body)

    # Then the answer is a workspaceResponse (CR4), not the swagger's WorkspaceResourcesV2
    assert response.status_code == 200
    assert_conforms(response.json(), swagger.response_schema(TRANSFER_PATH, "post", 200))
    assert_conforms(response.json(), swagger.schema_for(swagger.WORKSPACE))


def test_simulator_contract_status_is_one_check_response_per_cr2(api: httpx.Client) -> None:
    # Given a seeded family / When statuses are read
    bodies = [api.get(f"/v1/workspaces/{wid}/status").json() for wid in (MASTER, "c1", "g1")]

    # Then each is one WorkspaceCheckResponse object, with status required (CR3)
    schema = swagger.response_schema(STATUS_PATH, "get", 200)
    for body in bodies:
        assert_conforms(body, schema)
    assert [b["status"] for b in bodies] == ["created", "created", "error"]


def test_simulator_contract_family_is_an_array_of_workspace_responses(
    api: httpx.Client,
) -> None:
    # Given a seeded family / When the master's family is listed
    response = api.get(f"/v1/workspaces/{MASTER}/family")

    # Then it validates as the swagger's bare array of workspaceResponse
    assert response.status_code == 200
    assert_conforms(response.json(), swagger.response_schema(FAMILY_PATH, "get", 200))
    # And limits_enabled sits where the swagger puts it: product_tiers[].product.limits_enabled
    master = response.json()[0]
    ai_tier = next(t for t in master["product_tiers"] if t["product"]["id"] == "ai")
    assert ai_tier["product"]["limits_enabled"] is False


def test_simulator_contract_create_child_matches_workspace_response(api: httpx.Client) -> None:
    # Given create bodies with and without resources (DOC1: resources is optional)
    bodies = [
        {"title": "With", "resources": {"ai": {"projects": 1, "prompts": 100}}},
        {"title": "Without"},
    ]
    request_schema = swagger.request_body_schema(CHILD_PATH, "post")

    for body in bodies:
        swagger.validate_schema(body, request_schema)

        # When the child is created
        response = api.post(f"/v2/workspaces/{MASTER}/child", json=body)

        # Then the answer is a workspaceResponse
        assert response.status_code == 200
        assert_conforms(response.json(), swagger.response_schema(CHILD_PATH, "post", 200))


@pytest.mark.parametrize(
    ("method", "template", "status", "headers"),
    [
        ("get", RESOURCES_PATH, 401, {"Authorization": ""}),
        ("get", STATUS_PATH, 403, {}),
        ("get", FAMILY_PATH, 403, {}),
    ],
)
def test_simulator_contract_error_bodies_match_basic_response(
    api: httpx.Client, method: str, template: str, status: int, headers: dict[str, str]
) -> None:
    # Given an unknown id or a missing bearer / When the operation is called
    response = api.request(method.upper(), template.format(id="ghost"), headers=headers)

    # Then the status is the documented one and the body validates as BasicResponse
    assert response.status_code == status
    swagger.validate_schema(response.json(), swagger.response_schema(template, method, status))


def test_simulator_contract_corrections_are_applied_to_the_helper() -> None:
    # Given the corrected spec
    if not swagger.is_available():
        pytest.skip("vendored swagger not found")
    status_schema = swagger.response_schema(STATUS_PATH, "get", 200)
    workspace_schema = swagger.schema_for(swagger.WORKSPACE)

    # When / Then CR2: status is an object, an array is refused
    swagger.validate_schema({"status": "created"}, status_schema)
    with pytest.raises(jsonschema.ValidationError):
        swagger.validate_schema([{"status": "created"}], status_schema)
    # CR3: a workspace without its identity trio is refused
    with pytest.raises(jsonschema.ValidationError):
        swagger.validate_schema({"id": "x", "title": "t"}, workspace_schema)
    # CR1: no operation still asks for the Auth-Data-Jwt header
    spec = swagger.load_spec()
    assert not any(
        parameter.get("name") == "Auth-Data-Jwt"
        for item in spec["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict)
        for parameter in operation.get("parameters", [])
    )
    # And concrete paths find their template
    assert swagger.operation_path("/enterprise/users/api/v1/workspaces/c1/status") == STATUS_PATH
