"""A stand-in for the release before completions without output (docs/protocols.md §4.2,
§4.6): ``python prev_release.py control|worker <ql3 arguments>`` runs the installed ``ql3``
with, in this process only, what that release lacked:

- ``control``: the route ``POST /v1/worker/complete-no-output`` (removed from the worker
  router before the app is built, so the replica answers 404 to it as an older one does);
- ``worker``: its use (``ControlClient.v2_routes_ok`` always False: each attempt asks an
  upload grant, PUTs its log, empty or not, and completes through ``/complete``).

Production has no such switch. Exit 2 when the kind is unknown.
"""

from __future__ import annotations

import sys

KINDS = ("control", "worker")
OLDER_LACKS = ("/v1/worker/complete-no-output",)


def command(kind: str) -> tuple[str, ...]:
    """The argv prefix that runs ``ql3`` as the previous release's ``kind``."""
    from pathlib import Path

    return (sys.executable, str(Path(__file__).resolve()), kind)


def _older(kind: str) -> None:
    if kind == "control":
        from qinglong.control.api import worker_routes

        worker_routes.router.routes[:] = [
            r for r in worker_routes.router.routes
            if getattr(r, "path", "") not in OLDER_LACKS]
    else:
        from qinglong.worker.client import ControlClient

        ControlClient.v2_routes_ok = lambda self: False  # type: ignore[method-assign]


def main() -> None:
    """``prev_release.py KIND ARGS...``: ``ql3 ARGS...`` as the previous release's KIND."""
    if len(sys.argv) < 2 or sys.argv[1] not in KINDS:
        sys.stderr.write(f"usage: prev_release.py {'|'.join(KINDS)} <ql3 arguments>\n")
        raise SystemExit(2)
    from importlib.metadata import entry_points

    (ql3,) = entry_points(group="console_scripts", name="ql3")  # what the ql3 script runs
    entry = ql3.load()
    _older(sys.argv[1])
    sys.argv = ["ql3", *sys.argv[2:]]
    entry()


if __name__ == "__main__":
    main()
