"""A default ensure from Python and from Node produce the same body (the cross-language test).

Both compare against tests/fixtures/default-ensure.json (clients/node/test/contract.test.js
for Node); this one also runs the Node client's buildEnsure itself (Node is part of
``make setup``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from serenity_allocator.adapters.sqs import _entry, build_ensure

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "default-ensure.json").read_text("utf-8"))
NODE_CLIENT = ROOT / "clients" / "node"


def _python_body() -> Any:
    given = FIXTURE["input"]
    request = build_ensure(
        given["workspace_id"],
        given["parent_workspace_id"],
        given["need"],
        request_id=given["request_id"],
    )
    return json.loads(_entry(request)["MessageBody"])


def test_a_default_python_ensure_sends_the_contracts_body() -> None:
    # Given only the ids, a need and a request id / When the producer's body is built
    # Then it is the contract's body: drafts counted (include_drafted true)
    assert _python_body() == FIXTURE["body"]


def test_a_default_node_ensure_sends_the_same_body_as_python() -> None:
    # Given the same input handed to the Node client's buildEnsure
    given = FIXTURE["input"]
    script = (
        "import { buildEnsure } from './src/contract.js';"
        "const i = JSON.parse(process.argv[1]);"
        "process.stdout.write(JSON.stringify(buildEnsure({workspaceId: i.workspace_id,"
        " parentWorkspaceId: i.parent_workspace_id, need: i.need, requestId: i.request_id})));"
    )
    node = shutil.which("node")
    assert node is not None, "node is needed (make setup installs the Node client)"
    done = subprocess.run(  # our own client, no shell
        [node, "--input-type=module", "-e", script, json.dumps(given)],
        cwd=NODE_CLIENT,
        capture_output=True,
        check=True,
        text=True,
        timeout=60,
    )
    # When both bodies are compared / Then they are equal, field by field
    assert json.loads(done.stdout) == _python_body()
