"""The panel's paths under its mount (docs/panel.md "Cluster": links and redirects carry the
mount's prefix, ``/ui`` in control, "" when the panel is the whole site)."""

from __future__ import annotations

from starlette.requests import Request


def root(request: Request) -> str:
    """The mount's prefix (``/ui`` in control; "" when the panel is the whole site)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def relative(request: Request) -> str:
    """The request's path below the mount (``/ui/runs/x`` -> ``/runs/x``)."""
    path, prefix = request.url.path, root(request)
    return path[len(prefix):] or "/" if prefix and path.startswith(prefix) else path


def back(request: Request) -> str:
    """Where to go after a form: the same-origin page named by query parameter ``next`` (a
    path, prefix included), else the mount's first page."""
    home = root(request) + "/"
    target = request.query_params.get("next", home)
    safe = target.startswith("/") and not target.startswith(("//", "/\\"))
    return target if safe and "\\" not in target else home
