"""The web view's Starlette app: server-rendered pages, their live parts (server-sent events
for htmx's SSE extension, open only while a run is running), the actions (recover, requeue,
clear: POST or DELETE only) and the JSON API under /api/v1/. Every shape comes from
recovery.reports, as the CLI's `--json` does. Every request first goes through
recovery.ui.security (Host allow-list, token or session, CSRF and Origin checks, security
headers); the login page is the one page served without them."""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import inspect
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from html import escape
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, quote, urlencode

import anyio
from redis import Redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from recovery.environment import environment
from recovery.errors import BadRequest, NotFound, RecoveryError
from recovery.jobs import clear as jobs_clear
from recovery.jobs import dead_letters, metrics, reports
from recovery.tracking import keys, runs
from recovery.tracking import queue as failed_queue
from recovery.ui import svg, trace
from recovery.ui.access import check_token
from recovery.ui.actions import PreviewProcesses, RecoverProcess, RecoverProcesses
from recovery.ui.login import login_action, login_page
from recovery.ui.preview import preview_action, preview_page
from recovery.ui.security import (
    CSRF_FIELD,
    LOGIN_PATH,
    TOKEN_FIELD,
    Guard,
    SecurityMiddleware,
    wants_json,
)
from recovery.visible import visible

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


# An error's HTTP status, by its type (recovery/errors.py): a malformed request (a run id outside
# its alphabet), something that does not exist (a run, a component of it); any other refusal is
# a state the request cannot act on (a run still running, one without tracking): 409.
ERROR_STATUSES: tuple[tuple[type[RecoveryError], int], ...] = ((BadRequest, 400), (NotFound, 404))


def error_status(err: RecoveryError) -> int:
    return next((status for cls, status in ERROR_STATUSES if isinstance(err, cls)), 409)


class UI:
    """What the routes share: the Redis client, the templates, the recover processes."""

    def __init__(self, client: Redis, redis_url: str, log_dir: Path, guard: Guard):
        self.client = client
        self.redis_url = redis_url
        self.guard = guard
        self.processes = RecoverProcesses(redis_url, log_dir)
        self.previews = PreviewProcesses(redis_url, log_dir)
        # every form of the pages carries its session's CSRF value (security.py), never the token
        self.templates = Jinja2Templates(directory=str(HERE / "templates"), context_processors=[
            lambda request: {"csrf": getattr(request.state, CSRF_FIELD, "")}])
        # data (tuple values, errors) may hold control characters: shown as escapes, as the CLI
        # shows them; markup the app built (Markup: the SVGs, escaped already) passes as it is
        self.templates.env.finalize = lambda value: value if hasattr(value, "__html__") else visible(
            value, multiline=True)
        self.templates.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
        self.templates.env.filters["timestamp"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))
        self.templates.env.globals.update(COLUMNS=COLUMNS, STATUSES=STATUSES, CSRF_FIELD=CSRF_FIELD,
                                          TOKEN_FIELD=TOKEN_FIELD, LOGIN_PATH=LOGIN_PATH)

    # --- what a run page shows ------------------------------------------------------------
    def run_context(self, run_id: str) -> dict[str, Any]:
        from recovery.model.graph import topological_order
        from recovery.model.synthesis import synthesize
        client = self.client
        rec = runs.get(client, run_id)
        summary = reports.run_summary(client, run_id, rec)
        original = rec.original_workflow()
        failed = reports.failed(client, run_id).failed_positions
        dead = dead_letters.dead(client, run_id).dead
        plan = reports.plan(client, run_id)
        rounds = reports.rounds(client, run_id).rounds
        order = {cid: i for i, cid in enumerate(topological_order(original))}
        for r in rounds:   # the table lists components as the topology does (queue spouts first)
            r.components = dict(sorted(r.components.items(), key=lambda kv: order.get(kv[0], -1)))
        failed_by_component: dict[str, dict[int, int]] = {}
        for p in summary.failed_positions:
            failed_by_component.setdefault(p.component, {})[p.task] = p.count
        dead_by_component: dict[str, int] = {}
        for d in dead:
            dead_by_component[d.record.component] = dead_by_component.get(d.record.component, 0) + 1
        marks = svg.Marks(failed=failed_by_component, dead=dead_by_component,
                          rerun=plan.rerun if plan.failed else None)
        process = self.processes.state(run_id)
        plan_svg = ""
        if plan.failed:
            recovery_wf = synthesize(original, plan.failed)
            plan_svg = svg.topology(recovery_wf, title=f"recovery workflow {recovery_wf.name}")
        return {"run_id": run_id, "summary": summary, "workflow": original, "failed": failed,
                "dead_count": len(dead), "dead_by_component": dead_by_component, "plan": plan,
                "tasks_label": {c.id: f"{c.kind} ×{c.parallelism}" for c in original.components},
                "rounds": rounds, "topology_svg": svg.topology(original, marks),
                "plan_svg": plan_svg, "chart_svg": svg.rounds_chart(rounds),
                "process": process, "live": self.live(summary.status, process)}

    @staticmethod
    def live(status: str, process: RecoverProcess | None) -> bool:
        """Whether the run page follows the run: while it runs, or a recover this server
        started for it runs. Otherwise nothing changes it but a click, and no stream is open."""
        return status == runs.RUNNING or (process is not None and process.running)

    def is_live(self, run_id: str) -> bool:
        return self.live(runs.status_of(runs.get(self.client, run_id)), self.processes.state(run_id))

    def fingerprint(self, run_id: str) -> str:
        """Changes whenever what the run page shows can have changed (cheap to compute)."""
        rec = cast(list[bytes | None],
                   self.client.hmget(runs.record_key(run_id), "status", "round", "summary", "ended", "rounds"))
        if rec[0] is None:
            runs.get(self.client, run_id)   # raises: the run is gone
        process = self.processes.state(run_id)
        parts = [*(v or b"" for v in rec), *failed_queue.fingerprint(self.client, run_id),
                 json.dumps(dataclasses.asdict(process) if process else None, sort_keys=True).encode()]
        return hashlib.sha256(b"\0".join(parts)).hexdigest()

    def render_run_body(self, run_id: str) -> str:
        return self.templates.get_template("_run_body.html").render(**self.run_context(run_id))

    def render_live_run_body(self, run_id: str) -> str:
        """The run page's body wrapped to replace the page's (an htmx out-of-band swap) and to
        open its event stream: what a Recover click answers, so the page follows the recovery."""
        return self.templates.get_template("_run_live.html").render(**self.run_context(run_id), oob=True)


def _ui(request: Request) -> UI:
    ui: UI = request.app.state.ui
    return ui


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
    rows = reports.run_rows(ui.client, status)
    name = "_runs_table.html" if request.query_params.get("fragment") else "runs.html"
    return ui.templates.TemplateResponse(request, name, {
        "rows": rows, "status": status, "message": request.query_params.get("message"),
        "table_url": "/?" + urlencode({"fragment": 1, **({"status": status} if status else {})})})


def run_page(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    return ui.templates.TemplateResponse(request, "run.html", ui.run_context(run_id))


# The event that ends a run page's stream: the page's sse-close names it, so the browser
# closes its EventSource instead of reconnecting.
DONE_EVENT = "event: done\ndata: done\n\n"


async def run_events(request: Request) -> Response:
    """Server-sent events: `live` carries the run page's body whenever it changed; `done` ends
    the stream once the run is not running and no recover of this server runs for it (the
    last body first), so no connection stays open for a finished run."""
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    await anyio.to_thread.run_sync(runs.get, ui.client, run_id)    # unknown run: 404 before streaming

    async def stream() -> AsyncIterator[str]:
        last, quiet = None, 0.0
        while not await request.is_disconnected():
            try:
                live = await anyio.to_thread.run_sync(ui.is_live, run_id)
                mark = await anyio.to_thread.run_sync(ui.fingerprint, run_id)
                if mark != last:
                    html = await anyio.to_thread.run_sync(ui.render_run_body, run_id)
                    last, quiet = mark, 0.0
                    yield "event: live\n" + "".join(f"data: {line}\n" for line in html.splitlines()) + "\n"
            except RecoveryError as err:     # cleared meanwhile
                yield f"event: live\ndata: {_flash_html(str(err), error=True)}\n\n"
                yield DONE_EVENT
                return
            if not live:
                yield DONE_EVENT
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
    rows = dead_letters.dead(ui.client, run_id, component).dead
    by_position: dict[tuple[str, int], list[reports.ShownTuple]] = {}
    for r in rows:
        by_position.setdefault((r.record.component, r.record.task), []).append(r)
    return ui.templates.TemplateResponse(request, "dead.html", {
        "run_id": run_id, "positions": sorted(by_position.items()), "count": len(rows),
        "component": component, "summary": reports.run_summary(ui.client, run_id),
        "message": request.query_params.get("message")})


def clear_page(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    return ui.templates.TemplateResponse(request, "clear.html", {
        "run_id": run_id, "summary": reports.run_summary(ui.client, run_id)})


# --- actions (HTML forms; htmx posts get a fragment, plain posts a redirect) ----------------
def _flash(message: str, error: bool = False) -> HTMLResponse:
    return HTMLResponse(_flash_html(message, error))


def _flash_html(message: str, error: bool = False) -> str:
    return f'<p class="flash{" error" if error else ""}" role="status">{escape(visible(message))}</p>'


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
        return HTMLResponse(_flash_html(message) + ui.render_live_run_body(run_id))
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
    n = await anyio.to_thread.run_sync(lambda: dead_letters.requeue_dead(ui.client, run_id, None, selected))
    message = (f"requeued {n} dead tuple{'s' if n != 1 else ''}: recover the run to replay "
               f"{'them' if n != 1 else 'it'}")
    return RedirectResponse(f"/runs/{quote(run_id)}/dead?" + urlencode({"message": message}), status_code=303)


async def clear_action(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    form = await _form(request)
    if form.get("confirm") != [run_id]:
        return RedirectResponse(f"/runs/{quote(run_id)}/clear", status_code=303)
    cleared = await anyio.to_thread.run_sync(lambda: jobs_clear.clear(ui.client, run_id, False))
    ui.processes.forget(run_id)
    n = len(cleared.keys)
    return RedirectResponse("/?" + urlencode({"message": f"cleared {run_id}: {n} keys"}), status_code=303)


# --- Prometheus -----------------------------------------------------------------------------
def metrics_page(request: Request) -> Response:
    """Every run's metrics (recovery/jobs/metrics.py). The token is checked as on every request
    (security.py): Prometheus sends it as `Authorization: Bearer TOKEN`."""
    body, content_type = metrics.exposition(request.app.state.metrics)
    return Response(body, media_type=content_type)


# --- JSON API -------------------------------------------------------------------------------
def _json(obj: Any, status_code: int = 200) -> JSONResponse:
    return JSONResponse(json.loads(json.dumps(obj, default=str)), status_code=status_code)


def api_runs(request: Request) -> Response:
    return _json(reports.runs_list(_ui(request).client, request.query_params.get("status") or None))


def api_run(request: Request) -> Response:
    return _json(reports.run_status(_ui(request).client, request.path_params["run_id"]))


def _api_report(build: Callable[[Redis, str], reports.Report]) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        return _json(build(_ui(request).client, request.path_params["run_id"]).to_json())
    return endpoint


def api_component(request: Request) -> Response:
    p = request.path_params
    return _json(reports.component(_ui(request).client, p["run_id"], p["component"]).to_json())


def api_dead(request: Request) -> Response:
    return _json(dead_letters.dead(_ui(request).client, request.path_params["run_id"],
                                   request.query_params.get("component") or None).to_json())


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
        lambda: dead_letters.requeue(ui.client, run_id, component, selected)))


def api_recover(request: Request) -> Response:
    """POST only: a GET (an <img src> of any page) must never start anything."""
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    pid = ui.processes.start(ui.client, run_id)
    return _json({"run_id": run_id, "pid": pid, "started": True}, 202)


def api_clear(request: Request) -> Response:
    ui = _ui(request)
    run_id = request.path_params["run_id"]
    force = request.query_params.get("force") in ("1", "true")
    result = jobs_clear.report({run_id: jobs_clear.clear(ui.client, run_id, force)})
    ui.processes.forget(run_id)
    return _json(result)


# --- errors ---------------------------------------------------------------------------------
async def recovery_error(request: Request, err: Exception) -> Response:
    """What the CLI prints as `error: ...` and exit 2: JSON for the API, a page otherwise."""
    assert isinstance(err, RecoveryError)
    status = error_status(err)
    return _refusal(_ui(request), request.url.path, status, str(err))


async def http_error(request: Request, err: Exception) -> Response:
    """Starlette's own refusals (404 no such page, 405 wrong method), in the same two forms."""
    assert isinstance(err, HTTPException)
    path = request.url.path
    message = err.detail
    if err.status_code == 405:
        allowed = ", ".join(m for m in (err.headers or {}).get("Allow", "").split(", ") if m != "HEAD")
        message = f"{request.method} {path} is not allowed: use {allowed} (a GET never acts)"
    elif err.status_code == 404:
        message = f"no page {path} here (see / and /api/v1/runs)"
    response = _refusal(_ui(request), path, err.status_code, message)
    response.headers.update(err.headers or {})
    return response


def _refusal(ui: UI, path: str, status: int, message: str) -> Response:
    if wants_json(path):
        return _json({"error": message}, status)
    html = ui.templates.get_template("error.html").render(message=message)
    return HTMLResponse(html, status_code=status)


Endpoint = Callable[[Request], Response] | Callable[[Request], Awaitable[Response]]


def _checking_run_id(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """`endpoint`, refusing a run id path parameter outside the run-id alphabet (400) before
    it reads or writes anything: a run id becomes part of file names (the recover log)."""
    is_async = inspect.iscoroutinefunction(endpoint)

    async def checked(request: Request) -> Response:
        run_id = request.path_params.get("run_id")
        if run_id is not None:
            keys.check_run_id(run_id)   # RunIdError: a BadRequest (400)
        if is_async:
            return await cast(Callable[[Request], Awaitable[Response]], endpoint)(request)
        return await run_in_threadpool(cast(Callable[[Request], Response], endpoint), request)
    return checked


def _route(path: str, endpoint: Endpoint, methods: list[str] | None = None) -> Route:
    return Route(path, _checking_run_id(endpoint), methods=methods, name=endpoint.__name__)


class _GuardedStarlette(Starlette):
    """Starlette with the security middleware outside everything, its error pages included."""

    def build_middleware_stack(self) -> ASGIApp:
        ui: UI = self.state.ui
        return SecurityMiddleware(super().build_middleware_stack(), ui.guard,
                                  lambda path, status, message: _refusal(ui, path, status, message))


def create_app(client: Redis, redis_url: str, log_dir: Path, *, host: str = "127.0.0.1",
               port: int | None = None, token: str | None = None,
               allowed_hosts: tuple[str, ...] = (), no_token: bool = False) -> Starlette:
    """The web view over `client` (whose URL, `redis_url`, the recover processes get), served
    on `host`:`port` (the Host headers it answers to; None: any port, for an in-process test
    client). `token` is the per-server secret (else $RECOVERY_UI_TOKEN, else a new random one),
    in `app.state.token`, needed on every request (security.py) unless `no_token` (loopback only)."""
    run = "/runs/{run_id:str}"
    api = "/api/v1/runs/{run_id:str}"
    routes: list[BaseRoute] = [
        _route("/", runs_page),
        _route(LOGIN_PATH, login_page),
        _route(LOGIN_PATH, login_action, methods=["POST"]),
        _route(run, run_page),
        _route(run + "/events", run_events),
        _route(run + "/dead", dead_page),
        _route(run + "/dead/requeue", requeue_action, methods=["POST"]),
        _route(run + "/recover", recover_action, methods=["POST"]),
        _route(run + "/trace", trace.trace_page),
        _route(run + "/preview", preview_page),
        _route(run + "/preview", preview_action, methods=["POST"]),
        _route(run + "/clear", clear_page),
        _route(run + "/clear", clear_action, methods=["POST"]),
        _route("/metrics", metrics_page),
        _route("/api/v1/runs", api_runs),
        _route(api, api_run),
        _route(api, api_clear, methods=["DELETE"]),
        _route(api + "/rounds", _api_report(reports.rounds)),
        _route(api + "/components/{component:str}", api_component),
        _route(api + "/failed", _api_report(reports.failed)),
        _route(api + "/dead", api_dead),
        _route(api + "/dead/requeue", api_requeue, methods=["POST"]),
        _route(api + "/trace", trace.api_trace),
        _route(api + "/plan", _api_report(reports.plan)),
        _route(api + "/partitions", _api_report(reports.partitions)),
        _route(api + "/recover", api_recover, methods=["POST"]),
    ]
    routes.append(Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"))
    app = _GuardedStarlette(routes=routes, exception_handlers={RecoveryError: recovery_error,
                                                               HTTPException: http_error})
    env_token = environment().ui_token
    if token is None and env_token:
        token = check_token(env_token)
    guard = Guard.for_server(host, port, token, allowed_hosts, no_token)
    app.state.ui = UI(client, redis_url, log_dir, guard)
    app.state.token = guard.token
    app.state.metrics = metrics.registry_for(client)
    return app
