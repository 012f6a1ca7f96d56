"""The web view's preview: a run page's "Preview recovery" starts `recovery preview RUN` as a
separate process (recovery/ui/actions.py, as a recover is), and its page shows the result per
position and per sink before the Recover and Requeue buttons."""
from __future__ import annotations

from urllib.parse import parse_qs, quote

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from recovery.jobs import dead_letters, reports


async def preview_action(request: Request) -> Response:
    """Start `recovery preview RUN` (`--dead` from the dead-letters button); its page follows it."""
    ui = request.app.state.ui
    run_id = request.path_params["run_id"]
    form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    dead = form.get("dead") == ["1"]
    await anyio.to_thread.run_sync(lambda: ui.previews.start(ui.client, run_id, dead))
    return RedirectResponse(f"/runs/{quote(run_id)}/preview", status_code=303)


def preview_page(request: Request) -> Response:
    """The last preview this server started for the run: running (the page reloads itself),
    failed (its log), or its result, with the Recover and Requeue buttons after it."""
    ui = request.app.state.ui
    run_id = request.path_params["run_id"]
    response: Response = ui.templates.TemplateResponse(request, "preview.html", {
        "run_id": run_id, "summary": reports.run_summary(ui.client, run_id), "process": ui.previews.state(run_id),
        "dead_count": len(dead_letters.dead(ui.client, run_id).dead)})
    return response
