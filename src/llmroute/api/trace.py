"""``GET /trace/{request_id}``: one request's trace (``observe/trace.py``) as JSON, from
the in-memory ring of recent traces, else the trace store when configured; the id is the request's ``x-request-id`` (the
client's own when it sent one).

``?format=prov`` answers the trace's provenance instead, as W3C PROV-O JSON-LD
(``observe/prov.py``; the prompt and answer digests are the audit's alone: the trace does
not keep the texts). An id the router would not keep (``api/errors.is_request_id``: over 128
characters, non-ASCII, or with path, query or control characters) is a 400; an unknown (or
already forgotten) id is a 404, both OpenAI-shaped.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmroute.api.errors import REQUEST_ID_RULE, is_request_id
from llmroute.api.responses import json_response
from llmroute.errors import InvalidRequest, NotFound
from llmroute.observe import prov
from llmroute.observe.audit import audit_record
from llmroute.runtime import Runtime


async def get_trace(request: Request) -> Response:
    """The trace of ``request_id`` (its PROV-O JSON-LD with ``?format=prov``). Raises
    InvalidRequest (400) or NotFound (404)."""
    rt: Runtime = request.app.state.runtime
    rid = request.path_params["request_id"]
    if not is_request_id(rid):
        raise InvalidRequest(f"not a request id ({REQUEST_ID_RULE})", param="request_id")
    trace = await rt.observer.find(rid)
    if trace is None:
        raise NotFound(f"no trace for request {rid!r} (unknown, or no longer kept)",
                       param="request_id")
    if request.query_params.get("format") == "prov":
        obs = rt.observer
        record = audit_record(trace, router=obs.instance, config_sha256=obs.config_sha256)
        return json_response(prov.prov_o(prov.graph([record])))
    return json_response(trace.to_json())
