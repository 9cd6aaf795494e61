"""The task form, the row and bulk actions of the Tasks page, and the Runs page
(docs/panel.md "Pages"). Routes over any :class:`~qinglong.panel.backend.PanelBackend`;
:func:`routes` is called by :func:`qinglong.panel.app.create_app`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from qinglong.panel import forms
from qinglong.panel.backend import (
    BackendRefusedError,
    BackendUnavailableError,
    NotInProfileError,
    PanelBackend,
)
from qinglong.panel.paths import root

Render = Callable[..., Response]
Call = Callable[..., Awaitable[dict[str, Any]]]
RUNS_PAGE = 50
PREVIEW_COUNT = 5
BULK_ACTIONS = ("enable", "disable", "run", "delete")
FAILED = ("failed", "timed_out", "lost")
#: the scope a task definition's change needs where sessions have scopes (the cluster: as
#: the API's create, edit and delete, control/api/tasks.py); a local session has none
TASK_EDIT_SCOPE = "admin"
#: the largest form field the panel reads, as sent: percent-encoded, a CJK character takes
#: 9 bytes, so 32 MiB holds a 3.5 MiB Chinese text or 8 MiB of ASCII code (the cluster API's
#: body limit). Above every owner's own limit for a field (a script's 128 KiB, a request's
#: 1 MiB), so what the viewer meets is that owner's refusal worded by the page, with the
#: input kept; a field larger still gets the 413 page ``error.form_too_large``
#: (docs/panel.md "Large fields"), never Starlette's 500
FORM_FIELD_MAX_BYTES = 32 * 1024 * 1024
STATUSES = ("queued", "dispatching", "running", "succeeded", "failed", "cancelled",
            "timed_out", "lost")


async def form_of(request: Request) -> FormData:
    """The posted form (read once: by the CSRF check when the token came in the body).
    Raises starlette's MultiPartException for a field over FORM_FIELD_MAX_BYTES (the app
    answers 413 ``error.form_too_large``)."""
    data = getattr(request.state, "form_data", None)
    return data if data is not None else await read_form(request)


async def read_form(request: Request) -> FormData:
    """``request.form()`` with fields up to FORM_FIELD_MAX_BYTES. Raises MultiPartException
    for a larger field (Starlette reports it as an HTTPException 400 inside an app)."""
    try:
        return await request.form(max_part_size=FORM_FIELD_MAX_BYTES)
    except HTTPException as exc:
        raise MultiPartException(str(exc.detail)) from None


def default_zone(backend: PanelBackend) -> str:
    """The zone a new task's form starts with: the backend's ``default_timezone`` (the
    local owner's machine zone as ``ql3 local task add`` takes it, shared/zones.py; the
    cluster's ``serve --default-timezone``), else UTC as the cluster API's own default."""
    return str(getattr(backend, "default_timezone", None) or "UTC")


def need(backend: PanelBackend, feature: str) -> None:
    """Raise NotInProfileError unless ``backend`` serves the optional page ``feature``
    (qinglong.panel.backend.FEATURES): checked before a page shows anything."""
    if feature not in backend.features:
        raise NotInProfileError(feature)


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The routes of this module, to be placed before the Tasks page's ``/tasks/{name}/
    {action}`` route. Links and redirects carry the mount's prefix
    (:func:`qinglong.panel.paths.root`)."""

    async def preview(schedule: str, timezone: str) -> dict[str, Any]:
        """``{"times": [wall-clock text in the zone], "error": text or None}``."""
        if not schedule.strip():
            return {"times": [], "error": None}
        try:
            slots = (await call(backend.schedule_preview, schedule, timezone,
                                PREVIEW_COUNT))["slots"]
        except BackendRefusedError as exc:
            return {"times": [], "error": forms.owner_field(exc.message)[1]}
        return {"times": forms.local_times(slots, timezone), "error": None}

    def show_form(request: Request, form: forms.TaskForm, *, editing: str | None,
                  errors: dict[str, str], preview_: dict[str, Any], status: int = 200,
                  general: str | None = None) -> Response:
        return render(request, "task_form.html", status, form=form, editing=editing,
                      errors=errors, preview=preview_, zones=forms.zones(),
                      policies=forms.CONCURRENCY, general=general)

    async def new_task(request: Request) -> Response:
        need(backend, "task_edit")
        form = forms.TaskForm(timezone=default_zone(backend))
        source = request.query_params.get("copy")
        try:
            if source:  # a copy: everything but the name and the write-only secrets
                form = forms.TaskForm.from_task(await call(backend.task_get, source))
                form.name = ""
                form.secret_names = []
            return show_form(request, form, editing=None, errors={},
                             preview_=await preview(form.schedule, form.timezone))
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")

    async def edit_task(request: Request) -> Response:
        need(backend, "task_edit")
        name = request.path_params["name"]
        try:
            task = await call(backend.task_get, name)
            form = forms.TaskForm.from_task(task)
            return show_form(request, form, editing=name, errors={},
                             preview_=await preview(form.schedule, form.timezone))
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")

    async def save_task(request: Request) -> Response:
        need(backend, "task_edit")
        editing = request.path_params.get("name")
        data = await form_of(request)
        unset = [v for v in data.getlist("secret_unset") if isinstance(v, str)]
        form = forms.TaskForm.from_request(data, unset)
        spec, errors = forms.parse(form)
        form.secret_env = ""  # write-only: never sent back to the browser
        try:
            old = await call(backend.task_get, editing) if editing else None
            if old is not None:
                form.secret_names = sorted(dict(old.get("secret_env") or {}))
            if not errors:
                if old is not None and editing is not None:
                    saved = await call(backend.task_edit, editing,
                                       forms.edit_changes(spec, old, unset,
                                                          form.version))
                else:
                    saved = await call(backend.task_add, spec)
                return RedirectResponse(f"{root(request)}/?" + urlencode({"q": saved["name"]}),
                                        status_code=303)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "not_found" and editing:
                return render(request, "error.html", 404, message_key="error.not_found")
            where, text = forms.owner_field(exc.message)
            if where:
                errors[where] = text
            else:
                return show_form(request, form, editing=editing, errors=errors,
                                 preview_=await preview(form.schedule, form.timezone),
                                 status=400 if exc.usage else 409, general=text)
        return show_form(request, form, editing=editing, errors=errors, status=400,
                         preview_=await preview(form.schedule, form.timezone))

    async def preview_part(request: Request) -> Response:
        need(backend, "task_edit")
        schedule = request.query_params.get("schedule", "")[:500]
        timezone = request.query_params.get("timezone", "")[:100]
        try:
            found = await preview(schedule, timezone)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        return render(request, "task_preview.html", preview=found, zone=timezone)

    async def confirm_delete(request: Request) -> Response:
        need(backend, "task_edit")
        if not request.state.session.may(TASK_EDIT_SCOPE):
            return render(request, "error.html", 403, message_key="cform.admin_only")
        return render(request, "task_confirm.html", names=[request.path_params["name"]],
                      action="delete")

    async def bulk(request: Request) -> Response:
        data = await form_of(request)
        action = str(data.get("action", ""))
        names = [v for v in data.getlist("names") if isinstance(v, str) and v][:500]
        if action not in BULK_ACTIONS:
            return render(request, "error.html", 400, message_key="error.refused")
        if action == "delete":
            need(backend, "task_edit")
            if not request.state.session.may(TASK_EDIT_SCOPE):
                return render(request, "error.html", 403, message_key="cform.admin_only")
        back = list_state(str(data.get("back", "")))
        if action == "delete" and data.get("confirm") != "yes":
            return render(request, "task_confirm.html", names=names, action="delete",
                          back=back)
        done = failed = 0
        for name in names:
            try:
                if action == "run":
                    await call(backend.run_now, name)
                elif action == "delete":
                    await call(backend.task_remove, name)
                else:
                    await call(backend.set_enabled, name, action == "enable")
                done += 1
            except BackendUnavailableError:
                return render(request, "owner_down.html", 503)
            except BackendRefusedError:
                failed += 1
        # the runs just started are on the Runs page, where the profile has one
        target = "/runs" if action == "run" and "runs" in backend.features else "/"
        target = root(request) + target
        kept = back if target.endswith("/") else []  # the Tasks list as it was shown
        return RedirectResponse(
            f"{target}?{urlencode([*kept, ('done', done), ('failed', failed)])}",
            status_code=303)

    async def runs(request: Request) -> Response:
        need(backend, "runs")
        task = request.query_params.get("task", "").strip()[:200] or None
        status = request.query_params.get("status") or None
        if status is not None and status not in STATUSES:  # a typed address: say so
            kept = [("task", task)] if task else []
            base = f"{root(request)}/runs"
            choices = [(f"{base}?{urlencode([*kept, ('status', s)])}", f"status.{s}")
                       for s in STATUSES]
            choices.append((f"{base}?{urlencode(kept)}" if kept else base, "runs.any"))
            return render(request, "error.html", 400, message_key="runs.err.bad_status",
                          choices=choices)
        before = request.query_params.get("before") or None
        try:
            page = await call(backend.runs_page, task, status, before, RUNS_PAGE)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:  # a cursor not made by us
            page = {"runs": [], "next": None}
        older = None
        if page["next"]:
            older = f"{root(request)}/runs?" + urlencode({k: v for k, v in (
                ("task", task), ("status", status), ("before", page["next"])) if v})
        newest = f"{root(request)}/runs?" + urlencode(
            {k: v for k, v in (("task", task), ("status", status)) if v})
        return render(request, "runs.html", 200, page=page, task=task or "",
                      picked=status or "",
                      statuses=STATUSES, older=older, newest=newest if before else None,
                      done=count_param(request, "done"), failed=count_param(request, "failed"))

    async def dashboard(request: Request) -> Response:
        need(backend, "dashboard")
        try:
            page = await call(backend.runs_page, None, None, None, 200)
            tasks = await call(backend.task_page, 0, 200, "")
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        since = (datetime.now(UTC) - timedelta(days=1)).isoformat()
        recent = [r for r in page["runs"] if _utc(r.get("created_at")) >= since]
        failures = [r for r in recent if r["status"] in FAILED]
        upcoming = sorted((t for t in tasks["tasks"] if t.get("next_fire")),
                          key=lambda t: _utc(t["next_fire"]))[:10]
        return render(request, "dashboard.html", 200, recent=recent, failures=failures,
                      more=len(recent) == len(page["runs"]) and page["next"] is not None,
                      upcoming=upcoming, total=tasks["total"])

    return [
        Route("/dashboard", dashboard),
        Route("/tasks/new", new_task),
        Route("/tasks/new", save_task, methods=["POST"]),
        Route("/tasks/preview", preview_part),
        Route("/tasks/bulk", bulk, methods=["POST"]),
        Route("/tasks/{name}/edit", edit_task),
        Route("/tasks/{name}/edit", save_task, methods=["POST"]),
        Route("/tasks/{name}/delete", confirm_delete),
        Route("/runs", runs),
    ]


# bulk-keep: the Tasks list's own query parameters a bulk action carries back (the search,
# the page, and the sort/view of saved views), each at most 200 characters
LIST_PARAMS = ("q", "offset", "sort", "view", "label", "status")


def list_state(query: str) -> list[tuple[str, str]]:
    """The Tasks list's parameters in ``query`` (a query string without ``?``, as the bulk
    form's ``back`` field sends it): ``[(key, value)]`` of LIST_PARAMS only, in order, each
    key once; anything else (``done``, ``failed``, unknown keys) dropped."""
    kept: dict[str, str] = {}
    for key, value in parse_qsl(query[:2000], keep_blank_values=False):
        if key in LIST_PARAMS and key not in kept:
            kept[key] = value[:200]
    return list(kept.items())


def count_param(request: Request, key: str) -> int | None:
    """The small whole number in query parameter ``key`` (a bulk action's counts), or None."""
    value = request.query_params.get(key, "")
    return int(value) if value.isdigit() and len(value) < 7 else None


def _utc(text: object) -> str:
    """An ISO UTC instant (``…Z``) as comparable ``+00:00`` text; "" for none."""
    if not isinstance(text, str) or not text:
        return ""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).isoformat()
