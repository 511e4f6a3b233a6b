"""The JSON Schema of the allocation request (message v1), generated from the pydantic models.

Services in other languages (the real callers are Node services) validate against the checked-in
copy, ``docs/schemas/allocation-request-v1.schema.json``; a test fails when it drifts from the
models. Regenerate with ``serenity-allocator message-schema --write``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from serenity_allocator.domain.messages import ALLOCATION_REQUEST

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "docs" / "schemas"
SCHEMA_FILE = SCHEMA_PATH / "allocation-request-v1.schema.json"
SCHEMA_ID = "https://serenity-allocator.local/schemas/allocation-request-v1.schema.json"


def message_schema() -> dict[str, Any]:
    """The schema of one queue message body (ensure or release), version 1."""
    schema = ALLOCATION_REQUEST.json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "AllocationRequest v1",
        "description": (
            "The JSON body of one SQS FIFO message on the allocation queue. MessageGroupId "
            "must equal workspace_id and MessageDeduplicationId must equal request_id. "
            "Generated from serenity_allocator.domain.messages; do not edit by hand."
        ),
        **schema,
    }


def render_schema() -> str:
    """The schema as checked in: sorted keys, two-space indent, final newline."""
    return json.dumps(message_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``serenity-allocator message-schema`` options."""
    parser.add_argument(
        "--write", action="store_true", help=f"write {SCHEMA_FILE.name} under docs/schemas"
    )


def run(args: argparse.Namespace) -> int:
    """Print the schema, or write it to docs/schemas with ``--write``."""
    text = render_schema()
    if args.write:
        SCHEMA_PATH.mkdir(parents=True, exist_ok=True)
        SCHEMA_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}")
    else:
        print(text, end="")
    return 0
