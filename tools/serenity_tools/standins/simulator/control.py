"""The control routes (``/__reset``, ``/__seed``, ``/__faults``, ...) and who may call them.

They reshape the simulator's whole state, so only a local process may call them: the peer must
be a loopback address, the ``Host`` a loopback name (a DNS-rebinding page reaches a loopback peer
under a foreign name) and no ``Origin`` may be present (a browser adds one to every cross-origin
request, including the "simple" POSTs that skip CORS preflight; our own clients never send it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from . import ims, write_gate
from .model import (
    _INVALID_JSON,
    QuotaRefusedError,
    SimResponse,
    SimulatorRequestError,
    _bad_request,
    _object,
)
from .model import _parse_json_body as parse_json_body

if TYPE_CHECKING:
    from .state import SimulatorState

# Route -> method; bodies are described on :class:`.state.SimulatorState`.
CONTROL_ROUTES: Mapping[str, str] = {
    "/__reset": "POST",
    "/__seed": "POST",
    "/__usage": "POST",
    "/__faults": "POST",
    "/__auth": "POST",
    "/__dump": "GET",
    "/__calls": "GET",
    "/__calls/clear": "POST",
}


def is_loopback_peer(host: str) -> bool:
    """True when ``host`` (a peer IP address) is a loopback address, IPv4-mapped ones included.

    Control routes reshape the simulator's whole state, so only local processes may call them.
    """
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_host(host_header: str | None) -> bool:
    """True when a ``Host`` header names the local machine: ``localhost`` or a loopback IP."""
    if not host_header:
        return False
    try:
        name = urlsplit(f"//{host_header.strip()}").hostname
    except ValueError:
        return False
    if name is None:
        return False
    if name == "localhost" or name.endswith(".localhost"):
        # RFC 6761: *.localhost always resolves to loopback.
        return True
    return is_loopback_peer(name)


class _Headers(Protocol):
    def get(self, name: str) -> str | None: ...


def control_refusal(peer: str, headers: _Headers) -> SimResponse | None:
    """The 403 a control call gets, or ``None`` when a local process made it.

    Args:
        peer: The client's IP address.
        headers: The request headers (anything with ``get``: a dict, an ``email.message``).
    """
    if not is_loopback_peer(peer):
        return SimResponse(403, {"message": "control routes accept loopback clients only"})
    if headers.get("Origin") is not None:
        return SimResponse(403, {"message": "control routes refuse cross-origin requests"})
    if not is_loopback_host(headers.get("Host")):
        return SimResponse(403, {"message": "control routes accept loopback host names only"})
    return None


def handle_control(state: SimulatorState, method: str, path: str, body: bytes) -> SimResponse:
    """Answer one control route (no auth, never in the call log)."""
    if path.startswith("/__ims/"):
        return ims.handle_control(state.ims, method, path, body)
    if path not in CONTROL_ROUTES:
        return SimResponse(404, {"message": "unknown control route"})
    if CONTROL_ROUTES[path] != method:
        return SimResponse(405, {"message": "method not allowed"})
    parsed = parse_json_body(body)
    try:
        if parsed is _INVALID_JSON:
            raise _bad_request("request body must be JSON")
        return SimResponse(200, _control_answer(state, path, parsed))
    except QuotaRefusedError:
        return write_gate.QUOTA_REFUSAL
    except SimulatorRequestError as exc:
        return SimResponse(exc.status, {"message": exc.message})


def _control_answer(state: SimulatorState, path: str, body: Any) -> Any:
    if path == "/__reset":
        state.reset()
        return {"ok": True}
    if path == "/__seed":
        return {"seeded": state.seed(_object(body, "body").get("workspaces"))}
    if path == "/__usage":
        return state.usage(body)
    if path == "/__faults":
        return state.set_faults({} if body is None else body)
    if path == "/__auth":
        tokens = _object(body, "body").get("tokens")
        state.set_auth(tokens)
        # Never echo tokens back: they are secrets even in a simulator's answers.
        return {"restricted": tokens is not None, "count": len(tokens or ())}
    if path == "/__dump":
        return state.dump()
    if path == "/__calls":
        return {"calls": state.calls()}
    state.clear_calls()
    return {"ok": True}
