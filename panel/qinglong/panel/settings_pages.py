"""The Settings page (设置, docs/panel.md "Pages" and "Cluster"): what the profile is and how
it notifies, the language, and in the cluster the API tokens and the sign-in log.

The local profile shows its data directory, owner, recovery status and notification
channels; the cluster shows, to an admin session only (the API's scope for tokens and
channels), the push channels by target, a test that sends through the real notify path,
the tokens (create: the secret is on the answer page once; revoke after a confirmation
page) and the newest sign-ins. A change by any session but an admin's answers 403; the
app's guard has already checked CSRF and Origin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.paths import root
from qinglong.panel.security import Session
from qinglong.panel.task_pages import form_of, need

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]
SCOPES = ("viewer", "operator", "admin")
STATUSES = ("failed", "timed_out", "lost", "succeeded", "cancelled")


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The Settings page's routes (``/settings`` and below)."""

    def admin(request: Request) -> bool:
        session: Session = request.state.session
        return backend.profile != "cluster" or session.scope == "admin"

    async def one_item(request: Request, method: Callable[..., Any],
                       key: str) -> tuple[Any, Response | None]:
        """``method(key)`` on the backend for a token or channel page: (its answer, None), or
        (None, the page to answer instead): 503 owner down, 403 for a refused scope, 404
        for any other refusal (unknown or already gone)."""
        try:
            return await call(method, key), None
        except BackendUnavailableError:
            return None, render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "forbidden":
                return None, forbidden(request)
            return None, render(request, "error.html", 404, message_key="error.not_found")

    async def page(request: Request, status: int = 200, **ctx: Any) -> Response:
        need(backend, "settings")
        try:
            facts = await call(backend.settings)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        return render(request, "settings.html", status, facts=facts, scopes=SCOPES,
                      is_admin=admin(request),
                      revoked=request.query_params.get("revoked") == "1",
                      saved=request.query_params.get("saved") == "1",
                      channel_removed=request.query_params.get("channel_removed") == "1",
                      channel_added=request.query_params.get("channel_added", ""), **ctx)

    async def show(request: Request) -> Response:
        return await page(request)

    def forbidden(request: Request) -> Response:
        return render(request, "error.html", 403, message_key="settings.admin_only")

    async def notify_test(request: Request) -> Response:
        need(backend, "settings")
        if not admin(request):
            return forbidden(request)
        try:
            result = await call(backend.notify_test)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return forbidden(request)
        return await page(request, tested=result)

    # -- local notification settings --
    async def notify_save(request: Request) -> Response:
        """The local notification form: ``notify_on`` boxes, ``notify_timeout_s``, and the
        write-only ``notify_urls`` / ``notify_webhook`` (empty: kept; a ``*_clear`` box
        unsets), each through the owner's ``settings_set`` in that order; the first
        refusal stops there and is shown beside its field (earlier ones are saved)."""
        need(backend, "settings")
        setter = getattr(backend, "settings_set", None)
        if backend.profile != "local" or setter is None:
            return render(request, "error.html", 404, message_key="error.not_found")
        session: Session = request.state.session
        if not session.recent():
            return render(request, "reauth.html", 401, next=root(request) + "/settings")
        data = await form_of(request)
        on = [v for v in data.getlist("notify_on") if isinstance(v, str)]
        changes: list[tuple[str, str | None]] = [("notify_on", ",".join(on))]
        for key in ("notify_timeout_s", "notify_urls", "notify_webhook"):
            text = str(data.get(key, "")).strip()
            if data.get(key + "_clear"):
                changes.append((key, None))
            elif text:
                changes.append((key, text))
        for key, value in changes:
            try:
                await call(setter, key, value)
            except BackendUnavailableError:
                return render(request, "owner_down.html", 503)
            except BackendRefusedError:
                return await page(request, 400, notify_error=key)
        return RedirectResponse(root(request) + "/settings?saved=1", status_code=303)

    async def token_create(request: Request) -> Response:
        need(backend, "settings")
        if not admin(request):
            return forbidden(request)
        data = await form_of(request)
        name = str(data.get("name", ""))[:200]
        scope = str(data.get("scope", ""))
        try:
            issued = await call(backend.token_create, name, scope)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "forbidden":
                return forbidden(request)
            key = ("settings.token_name_taken" if exc.code == "token_name_taken"
                   else "settings.token_invalid")
            return await page(request, 400 if exc.usage else 409, token_error=key,
                              token_name=name, token_scope=scope)
        # the secret is on this answer only (Cache-Control: no-store on every response)
        return render(request, "token_issued.html", 200, issued=issued)

    async def revoke_confirm(request: Request) -> Response:
        need(backend, "settings")
        if not admin(request):
            return forbidden(request)
        token, refusal = await one_item(request, backend.token_get,
                                        request.path_params["token"])
        if refusal is not None:
            return refusal
        session: Session = request.state.session
        return render(request, "token_revoke.html", 200, token=token,
                      own=token["name"] == session.actor and token["state"] != "revoked")

    async def revoke(request: Request) -> Response:
        need(backend, "settings")
        if not admin(request):
            return forbidden(request)
        _, refusal = await one_item(request, backend.token_revoke, request.path_params["token"])
        if refusal is not None:
            return refusal
        # a session signed in with this token is gone at its next request (this redirect's)
        return RedirectResponse(root(request) + "/settings?revoked=1", status_code=303)

    # -- cluster push channels: add, remove after a confirmation page (admin, the API's
    # scope for /v1/notify/channels); the URL is write-only, never rendered back --
    def channel_method(name: str) -> Callable[..., Any]:
        method: Callable[..., Any] = getattr(backend, name)  # control's SettingsMixin
        return method

    async def channel_add(request: Request) -> Response:
        need(backend, "settings")
        if backend.profile != "cluster":
            return render(request, "error.html", 404, message_key="error.not_found")
        if not admin(request):
            return forbidden(request)
        data = await form_of(request)
        url = str(data.get("url", ""))[:2048]
        on = [v for v in data.getlist("notify_on") if isinstance(v, str)]
        try:
            added = await call(channel_method("channel_add"), url, on)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "forbidden":
                return forbidden(request)
            key = ("chan.err_keyring" if exc.code == "secrets_key_missing"
                   else "chan.err_invalid")
            return await page(request, 400 if exc.usage else 503, channel_error=key)
        return RedirectResponse(root(request) + "/settings?channel_added=" + added["id"],
                                status_code=303)

    async def channel_confirm(request: Request) -> Response:
        need(backend, "settings")
        if backend.profile != "cluster":
            return render(request, "error.html", 404, message_key="error.not_found")
        if not admin(request):
            return forbidden(request)
        channel, refusal = await one_item(request, channel_method("channel_get"),
                                          request.path_params["channel"])
        if refusal is not None:
            return refusal
        return render(request, "channel_remove.html", 200, channel=channel)

    async def channel_remove(request: Request) -> Response:
        need(backend, "settings")
        if backend.profile != "cluster":
            return render(request, "error.html", 404, message_key="error.not_found")
        if not admin(request):
            return forbidden(request)
        _, refusal = await one_item(request, channel_method("channel_remove"),
                                    request.path_params["channel"])
        if refusal is not None:
            return refusal
        return RedirectResponse(root(request) + "/settings?channel_removed=1", status_code=303)

    return [
        Route("/settings", show),
        Route("/settings/notify/test", notify_test, methods=["POST"]),
        Route("/settings/notify", notify_save, methods=["POST"]),
        Route("/settings/channels", channel_add, methods=["POST"]),
        Route("/settings/channels/{channel}/remove", channel_confirm),
        Route("/settings/channels/{channel}/remove", channel_remove, methods=["POST"]),
        Route("/settings/tokens", token_create, methods=["POST"]),
        Route("/settings/tokens/{token}/revoke", revoke_confirm),
        Route("/settings/tokens/{token}/revoke", revoke, methods=["POST"]),
    ]
