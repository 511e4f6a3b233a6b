"""The differential corpus of message v1: raw bodies and the worker's verdict on each.

Bodies are JSON TEXT, not values, so the spellings that matter survive (``250.0``, ``1e2``, a
lone surrogate escape, duplicate keys, whitespace between tokens). Each entry records whether
the worker's parser accepts the body and, for an accepted one, the cross-field problem the
worker finds when the body is sent under its own workspace id as group id. The Python tests
check the verdicts against the parser, the Node tests against ajv on the checked-in schema:
together, 0 disagreements means the worker accepts exactly what the schema accepts.

Generated with hypothesis (derandomized, so a regeneration is stable) plus one hand-written
group per category of known trouble. Regenerate: ``serenity-allocator message-schema --write``.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from serenity_allocator.domain.messages import cross_field_problem, parse_request

HYPOTHESIS_BODIES = 2000

_IDS = [
    '"child-1"', '"master-1"', '" child-1"', '"child-1 "', '"   "', '""', '"\\t"', '"child.1"',
    '".."', '"ch\\u00efld"', '"\\ud800"', '"a\\udc00b"', '"\\u0000"', '"a/b"', '"A_b-9"',
    '"' + "x" * 128 + '"', '"' + "x" * 129 + '"', "1", "null", "true", '"child-1\\n"',
]  # fmt: skip
_REQUEST_IDS = [
    '"req-1"', '"req 1"', '" req-1"', '"req-1 "', '"   "', '""', '"r\\u00e9q"', '"\\ud83d\\ude00"',
    '"\\ud800"', '"req\\u007f"', '"req\\u0000"', '"!\\"#$%&\'()*+,-./:;<=>?@[\\\\]^_`{|}~"',
    '"' + "r" * 128 + '"', '"' + "r" * 129 + '"', '"' + "r" * 5000 + '"', "7", "null",
    '"req-1\\n"', '"a.b..c"',
]  # fmt: skip
_COUNTS = [
    "0", "1", "250", "250.0", "1e2", "2.5e2", "1E+2", "25000e-2", "-0", "-0.0", "-1", "1.5",
    "1000000", "1000000.0", "1000001", "1e6", "1e7", "1e400", "-1e400", "99999999999999999999",
    "1e-400", "0.1e1", '"250"', "true", "null", "[]", "{}",
]  # fmt: skip
_LABELS = [
    '"org-1"',
    '"  "',
    '" org-1"',
    '"org 1"',
    '"br\\u00e4nd"',
    '"\\ud800"',
    '""',
    "null",
    "5",
]
_BOOLS = ["true", "false", "null", "0", "1", '"true"']
_VERSIONS = ["1", "1.0", "1e0", "10e-1", "2", "0", "true", '"1"', "null"]
_KINDS = ['"ensure"', '"release"', '"Ensure"', '"other"', "null", "1"]
_SOURCES = ['"service"', '"sweep"', '"reclaim"', '"other"', "null"]
_SPACES = ["", " ", "\n", "\t", "\r\n", "  "]


def _totals(dims: list[tuple[str, str]], extra: bool) -> str:
    pairs = [f'"{name}": {value}' for name, value in dims]
    if extra:
        pairs.append('"models": 1')
    return "{" + ", ".join(pairs) + "}"


@st.composite
def _totals_text(draw: st.DrawFn) -> str:
    dims = draw(
        st.lists(
            st.tuples(st.sampled_from(["projects", "prompts"]), st.sampled_from(_COUNTS)),
            max_size=3,
        )
    )
    return draw(st.sampled_from([_totals(dims, draw(st.booleans())), "null", "5", "[]"]))


def _field_values() -> dict[str, st.SearchStrategy[str]]:
    return {
        "version": st.sampled_from(_VERSIONS),
        "kind": st.sampled_from(_KINDS),
        "request_id": st.sampled_from(_REQUEST_IDS),
        "workspace_id": st.sampled_from(_IDS),
        "parent_workspace_id": st.sampled_from(_IDS),
        "need": _totals_text(),
        "ceiling": _totals_text(),
        "floor": _totals_text(),
        "include_drafted": st.sampled_from(_BOOLS),
        "org_id": st.sampled_from(_LABELS),
        "brand_id": st.sampled_from(_LABELS),
        "run_id": st.sampled_from(_LABELS),
        "source": st.sampled_from(_SOURCES),
        "surprise": st.sampled_from(["1", "null", '"x"']),
    }


_ENSURE_BASE = {
    "kind": '"ensure"', "request_id": '"req-1"', "workspace_id": '"child-1"',
    "parent_workspace_id": '"master-1"',
}  # fmt: skip
_RELEASE_BASE = {"kind": '"release"', "request_id": '"req-1"', "workspace_id": '"child-1"'}


@st.composite
def message_bodies(draw: st.DrawFn) -> str:
    """One body: mostly valid, with up to two fields changed, one dropped, a key repeated."""
    base = dict(draw(st.sampled_from([_ENSURE_BASE, _RELEASE_BASE])))
    values = _field_values()
    # Mostly valid bodies with one to three fields changed, added or dropped.
    for name in draw(st.lists(st.sampled_from(sorted(values)), max_size=2, unique=True)):
        base[name] = draw(values[name])
    for name in draw(st.lists(st.sampled_from(sorted(base)), max_size=1)):
        del base[name]
    pairs = list(base.items())
    if pairs and draw(st.integers(0, 9)) == 0:  # a duplicate key: the last one wins
        name = draw(st.sampled_from([name for name, _ in pairs]))
        pairs.append((name, draw(values[name])))
    space = draw(st.sampled_from(_SPACES))
    inner = f",{space}".join(f'"{name}"{space}:{space}{value}' for name, value in pairs)
    return "{" + space + inner + space + "}"


def _hypothesis_bodies() -> list[str]:
    bodies: list[str] = []

    @settings(
        max_examples=HYPOTHESIS_BODIES,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(message_bodies())
    def collect(body: str) -> None:
        bodies.append(body)

    collect()
    return bodies


def _ensure(**fields: str) -> str:
    merged = {**_ENSURE_BASE, "need": '{"prompts": 250}', **fields}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in merged.items()) + "}"


def _release(**fields: str) -> str:
    merged = {**_RELEASE_BASE, **fields}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in merged.items()) + "}"


def _categories() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = [("valid", _ensure()), ("valid", _release())]
    cases += [("whitespace-padded id", _ensure(workspace_id=v)) for v in _IDS[2:4]]
    cases += [("whitespace-padded id", _ensure(request_id=v)) for v in _REQUEST_IDS[2:4]]
    cases += [("whitespace-only id", _ensure(workspace_id='"   "'))]
    cases += [("whitespace-only id", _release(request_id='"  "'))]
    cases += [("whitespace-only label", _release(org_id='"  "', brand_id='" "'))]
    cases += [("whitespace between tokens", "\n\t{ \r\n" + _release()[1:-1] + "\n}\n ")]
    return cases


def _number_categories() -> list[tuple[str, str]]:
    cases = [
        ("number spelling", _ensure(need=f'{{"prompts": {v}}}'))
        for v in ["250.0", "1e2", "2.5E2", "25000e-2", "1.5", "-0", "-0.0", "0.1e1"]
    ]
    cases += [("number spelling", _ensure(version=v)) for v in _VERSIONS]
    cases += [
        ("huge or negative number", _release(floor=f'{{"projects": {v}}}'))
        for v in ["-1", "1000001", "1e400", "-1e400", "99999999999999999999", "1e-400", "1e6"]
    ]
    return cases


def _string_categories() -> list[tuple[str, str]]:
    cases = [("lone surrogate", _ensure(request_id=v)) for v in ['"\\ud800"', '"a\\udfff"']]
    cases += [("lone surrogate", _release(org_id='"\\udc00"'))]
    cases += [("lone surrogate", '{"request_id": "\\ud800", ' + _release()[1:])]
    cases += [("long string", _ensure(request_id=v)) for v in _REQUEST_IDS[12:15]]
    cases += [("long string", _ensure(parent_workspace_id=v)) for v in _IDS[15:17]]
    cases += [
        ("request id outside the SQS alphabet", _ensure(request_id=v)) for v in _REQUEST_IDS[6:11]
    ]
    return cases


def _shape_categories() -> list[tuple[str, str]]:
    cases = [("cross-field", _ensure(parent_workspace_id='"child-1"'))]
    cases += [("extra key", _release(surprise="1")), ("extra key", _ensure(need='{"models": 1}'))]
    cases += [("duplicate key", _release()[:-1] + ', "workspace_id": "child 2"}')]
    cases += [("duplicate key", _release()[:-1] + ', "kind": "ensure"}')]
    cases += [("not JSON or not an object", v) for v in ["", "[]", "null", "{", "\ufeff{}", '"x"']]
    cases += [("NaN or Infinity", _ensure(need='{"prompts": NaN}'))]
    cases += [("NaN or Infinity", _release()[:-1] + ', "floor": Infinity, "floor": null}')]
    cases += [("include_drafted", _ensure(include_drafted=v)) for v in _BOOLS]
    return cases


def _verdict(body: str) -> dict[str, Any]:
    try:
        request = parse_request(body)
    except ValidationError:
        return {"accepted": False, "cross_field": None}
    return {"accepted": True, "cross_field": cross_field_problem(request, request.workspace_id)}


def corpus() -> list[dict[str, Any]]:
    """Every body once (first category wins), with the worker's verdict."""
    cases = [*_categories(), *_number_categories(), *_string_categories(), *_shape_categories()]
    cases += [("hypothesis", body) for body in _hypothesis_bodies()]
    seen: set[str] = set()
    entries = []
    for category, body in cases:
        if body in seen:
            continue
        seen.add(body)
        entries.append({"category": category, "body": body, **_verdict(body)})
    return entries


def render_corpus() -> str:
    """The corpus as checked in: one entry per line, so a diff shows what changed."""
    lines = [json.dumps(entry, sort_keys=True, ensure_ascii=True) for entry in corpus()]
    return "[\n" + ",\n".join(lines) + "\n]\n"
