"""The login page: the one page served without the token (security.py), where a browser
that did not come through the printed URL trades the token for a session cookie."""
from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from recovery.ui.security import TOKEN_FIELD, local_target


def login_page(request: Request) -> Response:
    return _login(request, local_target(request.query_params.get("next")))


async def login_action(request: Request) -> Response:
    """The token typed in: a session cookie, and on to the page asked for; else the page
    again, 401. The page never shows the token, nor sends it anywhere else."""
    guard = request.app.state.ui.guard
    form = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    target = local_target((form.get("next") or ["/"])[0])
    presented = form.get(TOKEN_FIELD)
    if not guard.matches(presented[0] if presented else None):
        return _login(request, target, "that is not this web view's token", 401)
    response = RedirectResponse(target, status_code=303)
    guard.session_cookie(response, guard.new_session())
    return response


def _login(request: Request, target: str, error: str | None = None, status: int = 200) -> Response:
    templates: Jinja2Templates = request.app.state.ui.templates
    return templates.TemplateResponse(request, "login.html", {"next": target, "error": error}, status_code=status)
