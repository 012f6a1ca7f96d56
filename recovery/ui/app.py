"""The web view's Starlette app: server-rendered pages, their live parts (server-sent events
for htmx's SSE extension), the actions (recover, requeue, clear) and the JSON API under
/api/v1/. Every shape comes from recovery.reports, as the CLI's `--json` does."""
from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from html import escape
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, quote, urlencode

import anyio
from redis import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from recovery.errors import RecoveryError
from recovery.jobs import reports
from recovery.jobs import summary as jobs_summary
from recovery.tracking import keys, runs
from recovery.ui import svg
from recovery.ui.actions import RecoverProcesses

HERE = Path(__file__).resolve().parent
STATUSES = (runs.RUNNING, runs.PENDING, runs.COMPLETED, runs.DEAD, runs.CRASHED, runs.ERROR)
# How often a live page's server checks whether the run changed, and sends a keep-alive.
LIVE_POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0

# The components table's columns, with what each counter means (the headers' tooltips).
COLUMNS = (
    ("executed", "Executed",
     "Tuples this component's tasks ran process() on (a spout: next_tuple calls that emitted)."),
    ("acked", "Acked", "Tuples acked: processed successfully, their part of the root's tree done."),
    ("failed", "Failed", "Tuples that failed here (an exception, fail(), not acked, a timeout, a lost shell process); "
                         "each went to this task's queue for recovery, or to the dead letters."),
    ("emitted", "Emitted", "Tuples emitted to downstream components (anchored to their input)."),
    ("roots", "Roots", "Root tuples a spout emitted: each one's whole tree is tracked by the acker."),
    ("dead", "Dead", "Failed tuples that had used up recovery.max.attempts: kept as dead letters."),
    ("seconds", "Seconds", "Wall time of the slowest task of this component in the round."),
)


def _error_status(err: RecoveryError) -> int:
    """404 for what does not exist (a run, a component), 409 for a state the action refuses."""
    text = str(err)
    return 404 if text.startswith("no run ") or ": no component " in text else 409


class UI:
    """What the routes share: the Redis client, the templates, the recover processes."""

    def __init__(self, client: Redis, redis_url: str, log_dir: Path):
        self.client = client
        self.redis_url = redis_url
        self.processes = RecoverProcesses(redis_url, log_dir)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
        self.templates.env.filters["timestamp"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
        self.templates.env.globals.update(COLUMNS=COLUMNS, STATUSES=STATUSES)

    # --- what a run page shows ------------------------------------------------------------
    def run_context(self, run_id: str) -> dict[str, Any]:
        from recovery.model.graph import topological_order
        from recovery.model.synthesis import synthesize
        client = self.client
        summary = reports.run_status(client, run_id)
        original = jobs_summary.original_workflow(runs.get(client, run_id))
        failed = reports.failed(client, run_id)["failed_positions"]
        dead = reports.dead(client, run_id)["dead"]
        plan = reports.plan(client, run_id)
        rounds = reports.rounds(client, run_id)["rounds"]
        order = {cid: i for i, cid in enumerate(topological_order(original))}
        for r in rounds:   # the table lists components as the topology does (queue spouts first)
            r["components"] = dict(sorted(r["components"].items(), key=lambda kv: order.get(kv[0], -1)))
        failed_by_component: dict[str, dict[int, int]] = {}
        for p in failed:
            failed_by_component.setdefault(p["component"], {})[p["task"]] = p["count"]
        dead_by_component: dict[str, int] = {}
        for d in dead:
            dead_by_component[d["component"]] = dead_by_component.get(d["component"], 0) + 1
        marks = svg.Marks(failed=failed_by_component, dead=dead_by_component,
                          rerun=plan["rerun"] if plan["failed"] else None)
        process = self.processes.state(run_id)
        plan_svg = ""
        if plan["failed"]:
            recovery_wf = synthesize(original, plan["failed"])
            plan_svg = svg.topology(recovery_wf, title=f"recovery workflow {recovery_wf.name}")
        return {"run_id": run_id, "summary": summary, "workflow": original, "failed": failed,
                "dead_count": len(dead), "dead_by_component": dead_by_component, "plan": plan,
                "tasks_label": {c.id: f"{c.kind} ×{c.parallelism}" for c in original.components},
                "rounds": rounds, "topology_svg": svg.topology(original, marks),
                "plan_svg": plan_svg, "chart_svg": svg.rounds_chart(rounds),
                "process": process,
                "live": summary["status"] == runs.RUNNING or bool(process and process["running"])}

    def fingerprint(self, run_id: str) -> str:
        """Changes whenever what the run page shows can have changed (cheap to compute)."""
        rec = cast(list[bytes | None],
                   self.client.hmget(keys.run_record(run_id), "status", "round", "summary", "ended", "rounds"))
        if rec[0] is None:
            runs.get(self.client, run_id)   # raises: the run is gone
        parts = [*(v or b"" for v in rec), str(self.client.hlen(keys.dead(run_id))).encode(),
                 b",".join(sorted(cast(set[bytes], self.client.smembers(keys.failed_set(run_id))))),
                 json.dumps(self.processes.state(run_id), sort_keys=True).encode()]
        return hashlib.sha256(b"\0".join(parts)).hexdigest()

    def render_run_body(self, run_id: str) -> str:
        return self.templates.get_template("_run_body.html").render(**self.run_context(run_id))


def _ui(request: Request) -> UI:
    return request.app.state.ui


async def _form(request: Request) -> dict[str, list[str]]:
    """An HTML form's fields (application/x-www-form-urlencoded: the pages post no files, so
    no multipart parser is needed)."""
    return parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)


def _wants_fragment(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true"


# --- pages ----------------------------------------------------------------------------------
def runs_page(request: Request) -> Response:
    ui = _ui(request)
    status = request.query_params.get("status") or None
    rows = reports.runs_list(ui.client, status)["runs"]
    name = "_runs_table.html" if request.query_params.get("fragment") else "runs.html"
    return ui.templates.TemplateResponse(request, name, {
        "rows": rows, "status": status, "message": request.query_params.get("message"),
        "table_url": "/?" + urlencode({"fragment": 1, **({"status": status} if status else {})})})


def run_page(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    return ui.templates.TemplateResponse(request, "run.html", ui.run_context(run_id))


async def run_events(request: Request) -> Response:
    """Server-sent events: `live` carries the run page's body whenever it changed."""
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    await anyio.to_thread.run_sync(runs.get, ui.client, run_id)    # unknown run: 404 before streaming

    async def stream() -> AsyncIterator[str]:
        last, quiet = None, 0.0
        while not await request.is_disconnected():
            try:
                mark = await anyio.to_thread.run_sync(ui.fingerprint, run_id)
                if mark != last:
                    html = await anyio.to_thread.run_sync(ui.render_run_body, run_id)
                    last, quiet = mark, 0.0
                    yield "event: live\n" + "".join(f"data: {line}\n" for line in html.splitlines()) + "\n"
            except RecoveryError as err:     # cleared meanwhile
                yield f"event: live\ndata: <p class=\"flash error\">{escape(str(err))}</p>\n\n"
                return
            quiet += LIVE_POLL_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"
            await asyncio.sleep(LIVE_POLL_SECONDS)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def dead_page(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    component = request.query_params.get("component") or None
    rows = reports.dead(ui.client, run_id, component)["dead"]
    by_position: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        by_position.setdefault((r["component"], r["task"]), []).append(r)
    return ui.templates.TemplateResponse(request, "dead.html", {
        "run_id": run_id, "positions": sorted(by_position.items()), "count": len(rows),
        "component": component, "summary": reports.run_status(ui.client, run_id),
        "message": request.query_params.get("message")})


def clear_page(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    return ui.templates.TemplateResponse(request, "clear.html", {
        "run_id": run_id, "summary": reports.run_status(ui.client, run_id)})


# --- actions (HTML forms; htmx posts get a fragment, plain posts a redirect) ----------------
def _flash(message: str, error: bool = False) -> HTMLResponse:
    return HTMLResponse(f'<p class="flash{" error" if error else ""}" role="status">{escape(message)}</p>')


def recover_action(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    try:
        pid = ui.processes.start(ui.client, run_id)
    except RecoveryError as err:
        if _wants_fragment(request):
            return _flash(str(err), error=True)
        raise
    message = f"recovery of {run_id} started (recover pid {pid}); this page follows it"
    if _wants_fragment(request):
        return _flash(message)
    return RedirectResponse(f"/runs/{quote(run_id)}", status_code=303)


async def requeue_action(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    form = await _form(request)
    if form.get("one"):
        selected: list[str] | None = form["one"][:1]
    elif form.get("all"):
        selected = None
    else:
        selected = form.get("key", [])
        if not selected:
            return RedirectResponse(f"/runs/{quote(run_id)}/dead?" + urlencode(
                {"message": "nothing selected: tick the tuples to requeue"}), status_code=303)
    result = await anyio.to_thread.run_sync(lambda: reports.requeue(ui.client, run_id, None, selected))
    n = result["requeued"]
    message = (f"requeued {n} dead tuple{'s' if n != 1 else ''}: recover the run to replay "
               f"{'them' if n != 1 else 'it'}")
    return RedirectResponse(f"/runs/{quote(run_id)}/dead?" + urlencode({"message": message}), status_code=303)


async def clear_action(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    form = await _form(request)
    if form.get("confirm") != [run_id]:
        return RedirectResponse(f"/runs/{quote(run_id)}/clear", status_code=303)
    result = await anyio.to_thread.run_sync(lambda: reports.clear(ui.client, [run_id], False))
    ui.processes.forget(run_id)
    n = len(result["removed"][run_id])
    return RedirectResponse("/?" + urlencode({"message": f"cleared {run_id}: {n} keys"}), status_code=303)


# --- JSON API -------------------------------------------------------------------------------
def _json(obj: Any, status_code: int = 200) -> JSONResponse:
    return JSONResponse(json.loads(json.dumps(obj, default=str)), status_code=status_code)


def api_runs(request: Request) -> Response:
    return _json(reports.runs_list(_ui(request).client, request.query_params.get("status") or None))


def api_run(request: Request) -> Response:
    return _json(reports.run_status(_ui(request).client, request.path_params["run_id"]))


def _api_report(build: Any) -> Any:
    def endpoint(request: Request) -> Response:
        return _json(build(_ui(request).client, request.path_params["run_id"]))
    return endpoint


def api_component(request: Request) -> Response:
    p = request.path_params
    return _json(reports.component(_ui(request).client, p["run_id"], p["component"]))


def api_dead(request: Request) -> Response:
    return _json(reports.dead(_ui(request).client, request.path_params["run_id"],
                              request.query_params.get("component") or None))


async def api_requeue(request: Request) -> Response:
    """Body (JSON, optional): {"keys": ["component:task:id", ...]} or {"component": "C"}; none: all."""
    ui = _ui(request)
    body = await request.body()
    try:
        args = json.loads(body) if body.strip() else {}
    except json.JSONDecodeError as err:
        return _json({"error": f"request body is not JSON: {err}"}, 400)
    if not isinstance(args, dict):
        return _json({"error": "request body must be a JSON object"}, 400)
    selected, component = args.get("keys"), args.get("component")
    if selected is not None and not (isinstance(selected, list) and all(isinstance(k, str) for k in selected)):
        return _json({"error": '"keys" must be a list of "component:task:id" strings'}, 400)
    if component is not None and not isinstance(component, str):
        return _json({"error": '"component" must be a component id'}, 400)
    run_id = request.path_params["run_id"]
    return _json(await anyio.to_thread.run_sync(
        lambda: reports.requeue(ui.client, run_id, component, selected)))


def api_recover(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    if request.method == "POST":
        pid = ui.processes.start(ui.client, run_id)
        return _json({"run_id": run_id, "pid": pid, "started": True}, 202)
    runs.get(ui.client, run_id)
    return _json({"run_id": run_id, "process": ui.processes.state(run_id)})


def api_clear(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    force = request.query_params.get("force") in ("1", "true")
    result = reports.clear(ui.client, [run_id], force)
    ui.processes.forget(run_id)
    return _json(result)


# --- errors ---------------------------------------------------------------------------------
async def recovery_error(request: Request, err: Exception) -> Response:
    """What the CLI prints as `error: ...` and exit 2: JSON for the API, a page otherwise."""
    assert isinstance(err, RecoveryError)
    status = _error_status(err)
    if request.url.path.startswith("/api/"):
        return _json({"error": str(err)}, status)
    ui = _ui(request)
    return ui.templates.TemplateResponse(request, "error.html", {"message": str(err)}, status_code=status)


def create_app(client: Redis, redis_url: str, log_dir: Path) -> Starlette:
    """The web view over `client` (whose URL, `redis_url`, the recover processes get)."""
    run = "/runs/{run_id:str}"
    api = "/api/v1/runs/{run_id:str}"
    routes = [
        Route("/", runs_page),
        Route(run, run_page),
        Route(run + "/events", run_events),
        Route(run + "/dead", dead_page),
        Route(run + "/dead/requeue", requeue_action, methods=["POST"]),
        Route(run + "/recover", recover_action, methods=["POST"]),
        Route(run + "/clear", clear_page),
        Route(run + "/clear", clear_action, methods=["POST"]),
        Route("/api/v1/runs", api_runs),
        Route(api, api_run),
        Route(api, api_clear, methods=["DELETE"]),
        Route(api + "/rounds", _api_report(reports.rounds)),
        Route(api + "/components/{component:str}", api_component),
        Route(api + "/failed", _api_report(reports.failed)),
        Route(api + "/dead", api_dead),
        Route(api + "/dead/requeue", api_requeue, methods=["POST"]),
        Route(api + "/plan", _api_report(reports.plan)),
        Route(api + "/partitions", _api_report(reports.partitions)),
        Route(api + "/recover", api_recover, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={RecoveryError: recovery_error})
    app.state.ui = UI(client, redis_url, log_dir)
    return app
