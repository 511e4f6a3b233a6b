"""The vendored Semrush User Manager swagger, with our corrections, as JSON Schemas.

The swagger lives OUTSIDE the project (``<repo>/../shared/contract/usermanager_swagger.yaml``)
and is never copied in; when it is absent every caller is skipped. It is Swagger 2.0
(``definitions``, body parameters, draft-4 schemas), so schemas are validated with
``jsonschema.Draft4Validator`` and ``$ref``s resolve against the definitions embedded in the
root of every schema this module returns.

Corrections applied (``contract/corrections.yaml`` targets the OpenAPI 3 conversion; these are
the same actions expressed on the Swagger 2.0 document):

- CR1: drop the ``Auth-Data-Jwt`` header parameter everywhere; bearer auth (``imsBearer``).
- CR2: ``GET /v1/workspaces/{id}/status`` 200 is one ``handlers.WorkspaceCheckResponse``.
- CR3: ``handlers.workspaceResponse`` requires ``id``/``title``/``status``;
  ``handlers.WorkspaceCheckResponse`` requires ``status``.
- CR4: ``POST /v2/workspaces/{id}/resources/transfer`` 200 is a ``handlers.workspaceResponse``.
- DOC1 (semrush-user-manager.md, which wins over the swagger): the create-child body is
  ``{title, resources?}``, so ``resources`` is not required on ``handlers.createWorkspaceV2Form``.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CONTRACT_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "contract"
SWAGGER_PATH = CONTRACT_DIR / "usermanager_swagger.yaml"
BASE_PATH = "/enterprise/users/api"

WORKSPACE = "handlers.workspaceResponse"
STATUS_CHECK = "handlers.WorkspaceCheckResponse"
RESOURCES = "page-engine-backend_internal_usermanager_core_domain.NewWorkspaceResources"
TRANSFER_FORM = "handlers.WorkspaceResourcesTransferV2Form"
CREATE_CHILD_FORM = "handlers.createWorkspaceV2Form"
BASIC_RESPONSE = "http_server.BasicResponse"

STATUS_PATH = "/v1/workspaces/{id}/status"
TRANSFER_PATH = "/v2/workspaces/{id}/resources/transfer"


def is_available() -> bool:
    """True when the vendored swagger is present next to the repository."""
    return SWAGGER_PATH.is_file()


def _require_swagger() -> None:
    if not is_available():
        pytest.skip(f"vendored swagger not found at {SWAGGER_PATH}")


@functools.cache
def _load_raw() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SWAGGER_PATH.open(encoding="utf-8") as handle:
        document: dict[str, Any] = yaml.load(handle, Loader=loader)
    return document


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


@functools.cache
def _load_corrected() -> dict[str, Any]:
    spec = copy.deepcopy(_load_raw())
    definitions = spec["definitions"]
    # CR1: bearer instead of the Auth-Data-Jwt header.
    spec["securityDefinitions"] = {
        "imsBearer": {"type": "apiKey", "in": "header", "name": "Authorization"}
    }
    spec["security"] = [{"imsBearer": []}]
    for item in spec["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "parameters" in operation:
                operation["parameters"] = [
                    parameter
                    for parameter in operation["parameters"]
                    if parameter.get("name") != "Auth-Data-Jwt"
                ]
    # CR2: status is one object, not an array.
    spec["paths"][STATUS_PATH]["get"]["responses"]["200"]["schema"] = _ref(STATUS_CHECK)
    # CR3: the always-present identity fields are required.
    definitions[WORKSPACE]["required"] = ["id", "title", "status"]
    definitions[STATUS_CHECK]["required"] = ["status"]
    # CR4: transfer answers the updated child workspace.
    spec["paths"][TRANSFER_PATH]["post"]["responses"]["200"]["schema"] = _ref(WORKSPACE)
    # DOC1: resources is optional on create child.
    form = definitions[CREATE_CHILD_FORM]
    form["required"] = [name for name in form.get("required", []) if name != "resources"]
    return spec


def load_spec() -> dict[str, Any]:
    """The corrected Swagger 2.0 document (a fresh deep copy); skips when it is absent."""
    _require_swagger()
    return copy.deepcopy(_load_corrected())


def _with_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    # allOf keeps a top-level $ref from hiding the definitions its pointer resolves into.
    return {"allOf": [copy.deepcopy(schema)], "definitions": _load_corrected()["definitions"]}


def schema_for(definition_name: str) -> dict[str, Any]:
    """A standalone JSON Schema for one swagger definition (``handlers.workspaceResponse``)."""
    _require_swagger()
    if definition_name not in _load_corrected()["definitions"]:
        raise KeyError(f"no definition {definition_name!r} in the swagger")
    return _with_definitions(_ref(definition_name))


def _operation(path: str, method: str) -> dict[str, Any]:
    _require_swagger()
    paths = _load_corrected()["paths"]
    template = path if path in paths else operation_path(path)
    if template is None or method.lower() not in paths[template]:
        raise KeyError(f"no operation {method.upper()} {path} in the swagger")
    operation: dict[str, Any] = paths[template][method.lower()]
    return operation


def request_body_schema(path: str, method: str) -> dict[str, Any]:
    """The JSON Schema of an operation's body parameter (template or concrete path)."""
    for parameter in _operation(path, method).get("parameters", []):
        if parameter.get("in") == "body":
            return _with_definitions(parameter["schema"])
    raise KeyError(f"{method.upper()} {path} takes no body")


def response_schema(path: str, method: str, status: int | str) -> dict[str, Any]:
    """The JSON Schema of an operation's response for one status (template or concrete path)."""
    responses = _operation(path, method).get("responses", {})
    response = responses.get(str(status))
    if response is None or "schema" not in response:
        raise KeyError(f"{method.upper()} {path} documents no {status} body")
    return _with_definitions(response["schema"])


def validate_schema(instance: Any, schema: dict[str, Any]) -> None:
    """Validate ``instance`` against a schema from this module; raises ``ValidationError``."""
    jsonschema.Draft4Validator(schema).validate(instance)


def validate(instance: Any, definition_name: str) -> None:
    """Validate ``instance`` against one swagger definition; raises ``ValidationError``."""
    validate_schema(instance, schema_for(definition_name))


def operation_path(concrete_path: str) -> str | None:
    """The swagger path template matching a concrete path (basePath optional), or None.

    Templates with more literal segments win (``/v1/workspaces/me`` over ``/{id}``).
    """
    _require_swagger()
    path = concrete_path.split("?", 1)[0]
    if path.startswith(BASE_PATH + "/"):
        path = path[len(BASE_PATH) :]
    best: tuple[int, str] | None = None
    for template in _load_corrected()["paths"]:
        pattern = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
        if re.match(pattern, path):
            literal_segments = sum(1 for part in template.split("/") if "{" not in part)
            if best is None or literal_segments > best[0]:
                best = (literal_segments, template)
    return None if best is None else best[1]


def undeclared_properties(instance: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Paths of object keys in ``instance`` that ``schema`` does not declare (fidelity check).

    The swagger never sets ``additionalProperties: false``, so plain validation accepts invented
    fields; this walk reports them. ``additionalProperties`` schemas are followed for map values.
    """
    definitions = _load_corrected()["definitions"]
    if "$ref" in schema:
        return undeclared_properties(
            instance, definitions[schema["$ref"].rsplit("/", 1)[-1]], where
        )
    found: list[str] = []
    for part in schema.get("allOf", []):
        found += undeclared_properties(instance, part, where)
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(instance):
            found += undeclared_properties(item, schema["items"], f"{where}[{index}]")
    if isinstance(instance, dict) and ("properties" in schema or "additionalProperties" in schema):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            if key in properties:
                found += undeclared_properties(value, properties[key], f"{where}.{key}")
            elif isinstance(extra, dict):
                found += undeclared_properties(value, extra, f"{where}.{key}")
            elif extra is not True:
                found.append(f"{where}.{key}")
    return found
