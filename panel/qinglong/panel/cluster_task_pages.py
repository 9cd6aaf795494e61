"""The cluster's task form pages (docs/panel.md "Cluster"): new, edit and copy over control's
task services (``ControlPanelBackend.task_*``, the API's JSON), and the schedule preview in
the task's zone and the viewer's. :func:`qinglong.panel.task_pages.routes` places these
before its own when the backend's profile is ``cluster``.

Task definitions need the scope the API requires for them (``admin``,
``control/api/tasks.py``): another session sees no form (403) and its POST is refused
(403) before the backend is called; the backend refuses it too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from qinglong.panel import cluster_form, forms, i18n
from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.cluster_form import ClusterTaskForm
from qinglong.panel.paths import root
from qinglong.panel.task_pages import (
    PREVIEW_COUNT,
    TASK_EDIT_SCOPE,
    default_zone,
    form_of,
    need,
)

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """``/tasks/new`` (GET, POST; ``?copy=NAME``), ``/tasks/preview`` and
    ``/tasks/{name}/edit`` (GET, POST) for the cluster."""

    def catalog(request: Request) -> dict[str, str]:
        return i18n.catalog(request.state.lang)

    async def preview(request: Request, schedule: str, timezone: str,
                      viewer: str) -> dict[str, Any]:
        """``{"times", "viewer_times", "viewer_zone", "error"}``: wall-clock times in the
        task's zone and, when it differs, in the viewer's (the browser's zone)."""
        found: dict[str, Any] = {"times": [], "viewer_times": [], "viewer_zone": None,
                                 "error": None}
        if not schedule.strip():
            return found
        try:
            slots = (await call(backend.schedule_preview, schedule, timezone,
                                PREVIEW_COUNT))["slots"]
        except BackendRefusedError as exc:
            t = catalog(request)
            found["error"] = (cluster_form.worded(exc.problems[0], t) if exc.problems
                              else t["cform.err.invalid"])
            return found
        found["times"] = forms.local_times(slots, timezone)
        if viewer and viewer != timezone and viewer in forms.zones():
            found["viewer_zone"] = viewer
            found["viewer_times"] = forms.local_times(slots, viewer)
        return found

    async def bundles() -> list[dict[str, Any]]:
        lister = getattr(backend, "bundle_picker", None)
        return list(await call(lister)) if lister is not None else []

    async def show(request: Request, form: ClusterTaskForm, *, editing: str | None,
                   errors: dict[str, str] | None = None, status: int = 200,
                   general: str | None = None) -> Response:
        viewer = request.query_params.get("viewer_zone", "")[:100]
        return render(request, "task_form_cluster.html", status, form=form, editing=editing,
                      errors=errors or {}, general=general, zones=forms.zones(),
                      policies=forms.CONCURRENCY, bundles=await bundles(),
                      preview=await preview(request, form.schedule, form.timezone, viewer))

    def allowed(request: Request) -> Response | None:
        """The 403 page unless the session may define tasks."""
        if request.state.session.may(TASK_EDIT_SCOPE):
            return None
        return render(request, "error.html", 403, message_key="cform.admin_only")

    async def new_task(request: Request) -> Response:
        need(backend, "task_edit")
        denied = allowed(request)
        if denied is not None:
            return denied
        form = ClusterTaskForm(timezone=default_zone(backend))
        source = request.query_params.get("copy")
        try:
            if source:  # a copy: everything but the name and the write-only secrets
                form = ClusterTaskForm.from_task(await call(backend.task_get, source)).copied()
            return await show(request, form, editing=None)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")

    async def edit_task(request: Request) -> Response:
        need(backend, "task_edit")
        denied = allowed(request)
        if denied is not None:
            return denied
        try:
            task = await call(backend.task_get, request.path_params["name"])
            return await show(request, ClusterTaskForm.from_task(task),
                              editing=str(task["name"]))
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")

    async def save_task(request: Request) -> Response:
        need(backend, "task_edit")
        denied = allowed(request)
        if denied is not None:
            return denied
        editing = request.path_params.get("name")
        form = ClusterTaskForm.from_request(await form_of(request))
        try:
            if editing is not None:
                old = await call(backend.task_get, editing)
                stored = ClusterTaskForm.from_task(old)
                form.name = form.name or stored.name  # left empty: the name stays
                form.argv = stored.argv
                form.secret_names = stored.secret_names  # only the stored ones count
                editing = stored.name
            else:
                form.secret_names = []  # a new task has no stored secret to keep
            spec, errors = cluster_form.body(form, editing=editing is not None)
            if not errors:
                if editing is not None:
                    saved = await call(backend.task_edit, editing, spec)
                else:
                    saved = await call(backend.task_add, spec)
                return RedirectResponse(f"{root(request)}/?" + urlencode(
                    {"q": str(saved.get("name") or form.name)}), status_code=303)
            general = None
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "not_found" and editing:
                return render(request, "error.html", 404, message_key="error.not_found")
            if exc.code == "forbidden":
                return render(request, "error.html", 403, message_key="cform.admin_only")
            errors, general = cluster_form.worded_problems(exc.problems, form,
                                                           catalog(request))
            if exc.code == "task_changed":  # as the local form words it, input kept
                general = catalog(request)["form.err.changed_meanwhile"]
            if not errors and general is None:
                general = catalog(request)["error.refused"]
            _forget_secrets(form, errors)
            return await show(request, form, editing=editing, errors=errors, general=general,
                              status=400 if exc.usage else 409)
        _forget_secrets(form, errors)
        return await show(request, form, editing=editing, errors=errors, general=general,
                          status=400)

    async def preview_part(request: Request) -> Response:
        need(backend, "task_edit")
        schedule = request.query_params.get("schedule", "")[:500]
        timezone = request.query_params.get("timezone", "")[:100]
        viewer = request.query_params.get("viewer_zone", "")[:100]
        try:
            found = await preview(request, schedule, timezone, viewer)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        return render(request, "task_preview.html", preview=found, zone=timezone)

    return [
        Route("/tasks/new", new_task),
        Route("/tasks/new", save_task, methods=["POST"]),
        Route("/tasks/preview", preview_part),
        Route("/tasks/{name}/edit", edit_task),
        Route("/tasks/{name}/edit", save_task, methods=["POST"]),
    ]


def _forget_secrets(form: ClusterTaskForm, errors: dict[str, str]) -> None:
    """Drop the secret values typed into a refused form (write-only: never sent back) and,
    when there were any, say beside the secrets that they must be typed again."""
    if (form.secret_new.strip() or form.secret_replace) and "secrets" not in errors:
        errors["secrets"] = "cform.secret_retype"
    form.forget_secrets()
