"""The notification child: sends over the network, so that `serve` never loads ssl.

``python -m qinglong.local.app.notify_child`` reads one JSON request on stdin and writes one
JSON list of outcomes on stdout (the views of :class:`~qinglong.local.app.notifier.Delivery`),
then exits 0. The request::

    {"facts": {...}, "webhook": "https://…" | null, "timeout_s": 10.0}

Only this process imports ``urllib.request`` (and with it ``ssl``/libcrypto): an idle
``serve`` stays within ADR-0069's edge memory gate (integration/test_edge_memory.py). The
parent bounds the whole child (:func:`qinglong.local.app.notifier.send_in_child`), so a
child that hangs costs one process group, killed, never the run.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

USER_AGENT = "ql3-notify/1"


def _ms_since(began: float) -> int:
    return round((time.monotonic() - began) * 1000)


def post_webhook(url: str, facts: dict[str, Any], timeout_s: float) -> dict[str, object]:
    """POST the facts as JSON; a 2xx answer within ``timeout_s`` seconds is success.

    Returns a delivery view ``{"channel": "webhook", "ok", "http_status"?, "error"?,
    "timed_out"?, "duration_ms"}`` (an error is a class of failure: never the URL). The
    request runs on a helper thread, so a server that trickles bytes cannot hold it longer.
    """
    began = time.monotonic()
    outcome: list[dict[str, object]] = []

    def post() -> None:
        request = urllib.request.Request(  # noqa: S310 (scheme checked when it was set)
            url, data=json.dumps(facts).encode(), method="POST",
            headers={"Content-Type": "application/json", "User-Agent": USER_AGENT})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:  # noqa: S310
                status = int(reply.status)
            outcome.append({"ok": 200 <= status < 300, "http_status": status})
        except urllib.error.HTTPError as exc:
            outcome.append({"ok": False, "http_status": exc.code, "error": f"HTTP {exc.code}"})
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            text = reason.strerror if isinstance(reason, OSError) and reason.strerror else (
                type(reason).__name__)
            outcome.append({"ok": False, "error": f"unreachable: {text}"})

    thread = threading.Thread(target=post, name="ql3-notify-webhook", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return {"channel": "webhook", "ok": False, "error": "timed out", "timed_out": True,
                "duration_ms": _ms_since(began)}
    return {"channel": "webhook", **outcome[0], "duration_ms": _ms_since(began)}


def handle(request: dict[str, Any]) -> list[dict[str, object]]:
    """Send every channel the request names, in order; one view each."""
    facts = request["facts"]
    timeout_s = float(request["timeout_s"])
    out: list[dict[str, object]] = []
    if request.get("webhook"):
        out.append(post_webhook(str(request["webhook"]), facts, timeout_s))
    return out


def main() -> int:
    """Read the request from stdin, write the outcomes to stdout; exit 0 (2: bad request)."""
    try:
        request = json.loads(sys.stdin.buffer.read())
    except ValueError:
        return 2
    sys.stdout.write(json.dumps(handle(request)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
