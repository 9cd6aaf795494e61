"""The cluster's Scripts page (docs/panel.md "Scripts"): the script bundles, a bundle's
files read-only and the tasks that use it, an upload (a gzip tar, or one file packed into
one) through the API's own checks, and removal of an unused bundle (admin sessions only;
refused while a task uses it).
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.paths import root
from qinglong.panel.security import Session
from qinglong.panel.task_pages import form_of, need

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]
MAX_UPLOAD_BYTES = 32 * 1024 * 1024  # the API's compressed bound (shared/bundles.py)
GZIP_MAGIC = b"\x1f\x8b"


def pack_single(name: str, data: bytes) -> bytes:
    """A gzip tar holding one regular file ``name`` (mode 0644, mtime 0, owner 0): what an
    upload of one file pushes. ValueError for a name with no file part."""
    base = posixpath.basename(name.replace("\\", "/")).strip()
    if not base or base in (".", ".."):
        raise ValueError("a file name")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(base)
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The bundle pages' routes: ``/bundles``, ``/bundles/{digest}``,
    ``/bundles/{digest}/file?path=``, POST ``/bundles/upload`` and
    ``/bundles/{digest}/delete``."""

    def detail_url(request: Request, digest: str, **query: str) -> str:
        tail = f"?{urlencode(query)}" if query else ""
        return f"{root(request)}/bundles/{quote(digest)}{tail}"

    async def listing(request: Request, problem: str | None = None, detail: str = "",
                      status: int = 200) -> Response:
        need(backend, "bundles")
        after = request.query_params.get("after") or None
        try:
            page = await call(backend.bundles_list, after)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            page = {"bundles": [], "next": None}
        return render(request, "bundles.html", status, page=page, problem=problem,
                      detail=detail, removed=request.query_params.get("removed") == "1")

    async def show(request: Request, problem: str | None = None,
                   status: int = 200) -> Response:
        need(backend, "bundles")
        digest = request.path_params["digest"]
        try:
            bundle = await call(backend.bundle_show, digest)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")
        session: Session = request.state.session
        files = {m["path"]: f"{detail_url(request, bundle['digest'])}/file?"
                 f"{urlencode({'path': m['path']})}" for m in bundle["members"]}
        pushed = request.query_params.get("pushed")
        return render(request, "bundle.html", status, bundle=bundle, files=files,
                      admin=session.scope == "admin", problem=problem,
                      pushed=pushed if pushed in ("new", "same") else None)

    async def show_file(request: Request) -> Response:
        need(backend, "bundles")
        digest = request.path_params["digest"]
        try:
            found = await call(backend.bundle_file, digest,
                               request.query_params.get("path", ""))
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")
        return render(request, "bundle_file.html", file=found,
                      back=detail_url(request, found["digest"]))

    async def upload(request: Request) -> Response:
        need(backend, "bundles")
        data = await form_of(request)
        sent = data.get("bundle")
        if not isinstance(sent, UploadFile) or not sent.filename:
            return await listing(request, "bundles.no_file", status=400)
        body = await sent.read(MAX_UPLOAD_BYTES + 1)
        if len(body) > MAX_UPLOAD_BYTES:
            return await listing(request, "bundles.too_large", status=413)
        if not body.startswith(GZIP_MAGIC):
            try:
                body = pack_single(sent.filename, body)
            except ValueError:
                return await listing(request, "bundles.no_file", status=400)
        try:
            pushed = await call(backend.bundle_push, body)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            return await listing(request, "bundles.refused", detail=exc.message,
                                 status=400 if exc.usage else 503)
        return RedirectResponse(detail_url(request, pushed["digest"], pushed=(
            "new" if pushed["created"] else "same")), status_code=303)

    async def delete(request: Request) -> Response:
        need(backend, "bundles")
        session: Session = request.state.session
        if session.scope != "admin":
            return render(request, "error.html", 403, message_key="bundles.admin_only")
        digest = request.path_params["digest"]
        try:
            await call(backend.bundle_remove, digest)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "bundle_in_use":
                return await show(request, "bundles.in_use", 409)
            return render(request, "error.html", 404, message_key="error.not_found")
        return RedirectResponse(f"{root(request)}/bundles?removed=1", status_code=303)

    return [
        Route("/bundles", listing),
        Route("/bundles/upload", upload, methods=["POST"]),
        Route("/bundles/{digest}", show),
        Route("/bundles/{digest}/file", show_file),
        Route("/bundles/{digest}/delete", delete, methods=["POST"]),
    ]
