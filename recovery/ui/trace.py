"""The trace pages: one root of a run followed (jobs/trace.py), as a page
(/runs/RUN/trace?root=ID, or ?message=VALUE) and as JSON (/api/v1/runs/RUN/trace, the shape
of `recovery trace --json`). The app (app.py) routes them through its checks like every page."""
from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from recovery.errors import BadRequest
from recovery.jobs import trace as trace_job


def _trace_of(request: Request) -> trace_job.RootTrace:
    """The trace a page or the API asks for: ?root=ID, or ?message=VALUE (its message id)."""
    q = request.query_params
    root, message = q.get("root") or None, q.get("message") or None
    if (root is None) == (message is None):
        raise BadRequest("give ?root=ID (as the dead letters show roots) or ?message=VALUE")
    return trace_job.trace(request.app.state.ui.client, request.path_params["run_id"], root, message)


def trace_page(request: Request) -> Response:
    result = _trace_of(request)
    page: Response = request.app.state.ui.templates.TemplateResponse(request, "trace.html",
                                                                     {"run_id": result.run_id, "trace": result})
    return page


def api_trace(request: Request) -> Response:
    return JSONResponse(json.loads(json.dumps(_trace_of(request).to_json(), default=str)))
