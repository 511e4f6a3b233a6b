"""The published contract, generated from the pydantic models: JSON Schemas and AsyncAPI.

- ``docs/schemas/allocation-request-v1.schema.json``: message v1, the body of one queue message;
- ``docs/schemas/allocation-outcome-v1.schema.json``: the outcome event's ``detail``;
- ``docs/schemas/ledger-record-v1.schema.json``: one request ledger record as a reader sees it;
- ``docs/asyncapi.json``: the queue and the bus, referencing the three;
- ``docs/schemas/allocation-request-v1.corpus.json``: the differential corpus (bodies and the
  worker's verdict on each) that the Python and the Node tests both check;
- ``docs/outcomes.md`` and the README's outcomes section: the callers' contract table
  (``src/serenity_allocator/contract/outcomes.json``), which also describes every status and
  code in the outcome schema (:mod:`.outcome_docs`);
- ``clients/node/types/contract.d.ts`` and ``clients/node/src/outcome-table.js``: the Node
  client's types and table, generated from the schemas and the table by its own script (needs
  Node and ``make node-install``).

Services in other languages validate against the checked-in copies (ajv ``Ajv2020`` strict, or
any draft 2020-12 validator); tests fail when they drift from the models. Regenerate every file
with ``serenity-allocator message-schema --write``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from serenity_allocator.adapters.eventbridge_outcomes import (
    EVENT_SOURCE,
    OUTCOME_DETAIL_TYPE,
    POOL_LOW_DETAIL_TYPE,
)
from serenity_allocator.contract.outcome_table import OutcomeTable, outcome_table
from serenity_allocator.domain.ledger import LedgerEntry
from serenity_allocator.domain.messages import ALLOCATION_REQUEST, AllocationOutcome

from .outcome_docs import OUTCOMES_DOC, README, readme_with_table, render_outcomes_doc

DOCS_PATH = Path(__file__).resolve().parents[3] / "docs"
SCHEMA_PATH = DOCS_PATH / "schemas"
SCHEMA_FILE = SCHEMA_PATH / "allocation-request-v1.schema.json"
OUTCOME_SCHEMA_FILE = SCHEMA_PATH / "allocation-outcome-v1.schema.json"
LEDGER_SCHEMA_FILE = SCHEMA_PATH / "ledger-record-v1.schema.json"
ASYNCAPI_FILE = DOCS_PATH / "asyncapi.json"
CORPUS_FILE = SCHEMA_PATH / "allocation-request-v1.corpus.json"
NODE_CLIENT = DOCS_PATH.parent / "clients" / "node"
NODE_TYPES_TIMEOUT_S = 120
SCHEMA_BASE = "https://serenity-allocator.local/schemas/"
SCHEMA_ID = SCHEMA_BASE + SCHEMA_FILE.name
_GENERATED = "Generated from the pydantic models by `serenity-allocator message-schema --write`."


def _portable(node: object) -> object:
    """The schema without pydantic's OpenAPI-only keywords (ajv strict refuses unknown ones)."""
    if isinstance(node, dict):
        return {key: _portable(value) for key, value in node.items() if key != "discriminator"}
    if isinstance(node, list):
        return [_portable(value) for value in node]
    return node


def _document(file: Path, title: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    portable = _portable(schema)
    assert isinstance(portable, dict)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_BASE + file.name,
        "title": title,
        "description": f"{description} {_GENERATED}",
        **portable,
    }


def message_schema() -> dict[str, Any]:
    """The schema of one queue message body (ensure or release), version 1."""
    return _document(
        SCHEMA_FILE,
        "AllocationRequest v1",
        "The JSON body of one SQS FIFO message on the allocation queue. MessageGroupId must "
        "equal workspace_id and MessageDeduplicationId must equal request_id. Two rules this "
        "schema cannot state end with an `invalid` outcome: MessageGroupId != workspace_id, and "
        "an ensure whose parent_workspace_id equals its workspace_id.",
        ALLOCATION_REQUEST.json_schema(mode="validation"),
    )


_TABLE_NOTE = "docs/outcomes.md, generated from src/serenity_allocator/contract/outcomes.json"


def _status_property(table: OutcomeTable) -> dict[str, Any]:
    """``status``: every status of the contract table, each with its meaning."""
    return {
        "title": "Status",
        "type": "string",
        "description": f"What happened to the request; each value's answer: {_TABLE_NOTE}.",
        "oneOf": [{"const": row.status, "description": row.meaning} for row in table.statuses],
    }


def _error_code_property(table: OutcomeTable) -> dict[str, Any]:
    """``error_code``: every code of the contract table (a family by its pattern), described."""
    exact = [
        {"const": row.code, "description": row.meaning} for row in table.codes if not row.pattern
    ]
    families = [
        {"type": "string", "pattern": row.pattern, "description": f"{row.code}: {row.meaning}"}
        for row in table.codes
        if row.pattern
    ]
    return {
        "title": "Error Code",
        "description": (
            "Why a rejected, failed or invalid request ended so (null otherwise); whether "
            f"anything was applied or retried, and the customer answer: {_TABLE_NOTE}."
        ),
        "anyOf": [*exact, *families, {"type": "null"}],
        "default": None,
    }


def _described(outcome: dict[str, Any]) -> dict[str, Any]:
    """An outcome's JSON Schema with ``status`` and ``error_code`` from the contract table."""
    table = outcome_table()
    properties = {
        **outcome["properties"],
        "status": _status_property(table),
        "error_code": _error_code_property(table),
    }
    return {**outcome, "properties": properties}


def outcome_schema() -> dict[str, Any]:
    """The schema of the outcome event's ``detail`` (and of a ledger record's ``outcome``)."""
    return _document(
        OUTCOME_SCHEMA_FILE,
        "AllocationOutcome v1",
        f"The detail of one outcome event (source {EVENT_SOURCE}, detail-type "
        f"{OUTCOME_DETAIL_TYPE}); absent fields are null. A reader ignores fields it does not "
        "know (new ones may be added). Every status and error code is one row of the callers' "
        f"contract ({_TABLE_NOTE}).",
        _described(AllocationOutcome.model_json_schema(mode="serialization")),
    )


def ledger_schema() -> dict[str, Any]:
    """The schema of one request ledger record, with its JSON-string attributes decoded."""
    return _document(
        LEDGER_SCHEMA_FILE,
        "LedgerRecord v1",
        "One item of the request ledger table (key request_id, a string), as a reader sees it "
        "after unmarshalling: in DynamoDB `outcome` and `intent` are strings holding JSON "
        "(decode them), `provisional` is a BOOL and `updated_at` a number (epoch seconds). "
        "Reading rule: pending unless state is final or deadLettered with an outcome; a "
        "provisional deadLettered record counts as pending until updated_at + 180 s. A reader "
        "ignores attributes it does not know (status, workspace_id, expires_at, ...).",
        _ledger_entry_schema(),
    )


def _ledger_entry_schema() -> dict[str, Any]:
    schema = LedgerEntry.model_json_schema(mode="serialization")
    defs = schema["$defs"]
    return {**schema, "$defs": {**defs, "AllocationOutcome": _described(defs["AllocationOutcome"])}}


def asyncapi_document() -> dict[str, Any]:
    """The queue (what a producer sends) and the bus (what the worker announces)."""
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "serenity-allocator",
            "version": "1.0.0",
            "description": (
                "Producers send allocation requests to the FIFO queue (stack output "
                "AllocationQueueUrl; permission sqs:SendMessage on AllocationQueueArn). The "
                "worker stores one terminal outcome per request id in the request ledger "
                "(RequestLedgerTableName), then publishes it on the outcome bus "
                f"(OutcomeBusName). {_GENERATED}"
            ),
        },
        "channels": {
            "allocationQueue": {
                "address": "AllocationQueueUrl",
                "description": (
                    "SQS FIFO. MessageGroupId = workspace_id, MessageDeduplicationId = "
                    "request_id, body = one AllocationRequest v1."
                ),
                "messages": {"allocationRequest": {"$ref": "#/components/messages/request"}},
            },
            "outcomeBus": {
                "address": "OutcomeBusName",
                "description": (
                    f"EventBridge. source {EVENT_SOURCE}, detail-type {OUTCOME_DETAIL_TYPE}; "
                    "at least once (deduplicate on request_id; every copy equals the ledger "
                    f"record's outcome). The bus also carries {POOL_LOW_DETAIL_TYPE} events for "
                    "operators; a service's rule matches on the outcome detail-type."
                ),
                "messages": {"allocationOutcome": {"$ref": "#/components/messages/outcome"}},
            },
        },
        "operations": {
            "sendAllocationRequest": {
                "action": "send",
                "channel": {"$ref": "#/channels/allocationQueue"},
            },
            "receiveAllocationOutcome": {
                "action": "receive",
                "channel": {"$ref": "#/channels/outcomeBus"},
            },
        },
        "components": {
            "messages": {
                "request": {
                    "name": "AllocationRequest",
                    "contentType": "application/json",
                    "payload": {
                        "schemaFormat": "application/schema+json;version=draft-2020-12",
                        "schema": {"$ref": f"schemas/{SCHEMA_FILE.name}"},
                    },
                },
                "outcome": {
                    "name": "AllocationOutcome",
                    "contentType": "application/json",
                    "payload": {
                        "schemaFormat": "application/schema+json;version=draft-2020-12",
                        "schema": {"$ref": f"schemas/{OUTCOME_SCHEMA_FILE.name}"},
                    },
                },
            }
        },
    }


def _render(document: object) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_schema() -> str:
    """The message schema as checked in: sorted keys, two-space indent, final newline."""
    return _render(message_schema())


def rendered_files() -> dict[Path, str]:
    """Every generated contract file but the corpus, as checked in."""
    return {
        OUTCOMES_DOC: render_outcomes_doc(),
        README: readme_with_table(README.read_text(encoding="utf-8")),
        SCHEMA_FILE: render_schema(),
        OUTCOME_SCHEMA_FILE: _render(outcome_schema()),
        LEDGER_SCHEMA_FILE: _render(ledger_schema()),
        ASYNCAPI_FILE: _render(asyncapi_document()),
    }


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator message-schema`` options."""
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the schemas, the corpus (docs/schemas) and docs/asyncapi.json",
    )


def run(args: argparse.Namespace) -> int:
    """Print the message schema, or write every contract file with ``--write``."""
    if not args.write:
        print(render_schema(), end="")
        return 0
    # The corpus needs hypothesis (a dev dependency): imported only when writing.
    from .message_corpus import render_corpus

    files = {**rendered_files(), CORPUS_FILE: render_corpus()}
    SCHEMA_PATH.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return _write_node_types()


def _write_node_types() -> int:
    """Regenerate the Node client's types from the schemas just written (1 when it cannot)."""
    node = shutil.which("node")
    if node is None or not (NODE_CLIENT / "node_modules").is_dir():
        print("not written: clients/node/types/contract.d.ts (needs node; run make node-install)")
        return 1
    done = subprocess.run(  # our own script, no shell, no outside input
        [node, "scripts/generate-types.js"],
        cwd=NODE_CLIENT,
        check=False,
        timeout=NODE_TYPES_TIMEOUT_S,
    )
    return done.returncode
