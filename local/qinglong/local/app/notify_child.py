"""The notification child: ``python -m qinglong.local.app.notify_child``.

Reads ``{"facts", "webhook", "urls", "timeout_s"}`` as JSON on stdin, sends every channel
at once (one thread each, each within ``timeout_s``) and writes a JSON list of
:class:`~qinglong.local.app.notifier.Delivery` views. ``urls`` are Apprise URLs (the extra
``qinglong[notify]``), a failure retried with the shared backoff (1 s base, 8 s cap) while
time lasts; an outcome names scheme and host only. Only this process loads ssl or Apprise,
so an idle ``serve`` stays within ADR-0069's memory gate; the parent bounds it as a whole.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from qinglong.local.app.settings import channel_target

USER_AGENT = "ql3-notify/1"


def _ms_since(began: float) -> int:
    return round((time.monotonic() - began) * 1000)


def post_webhook(url: str, facts: dict[str, Any], timeout_s: float) -> dict[str, object]:
    """POST the facts as JSON (2xx within ``timeout_s`` s: ok) from a helper thread, so a
    trickling server cannot hold it longer. A view ``{"channel": "webhook", "ok",
    "http_status"?, "error"? (a class of failure, never the URL), "timed_out"?,
    "duration_ms"}``."""
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


RETRY_BASE_S = 1.0
RETRY_CAP_S = 8.0


def push_apprise(url: str, facts: dict[str, Any], timeout_s: float) -> dict[str, object]:
    """Send through one Apprise URL, retrying with the shared backoff within ``timeout_s``
    s: ``{"channel": scheme, "ok", "target", "tries", "error"?, "duration_ms"}``."""
    began = time.monotonic()
    scheme = url.partition("://")[0].lower()
    view: dict[str, object] = {"channel": scheme, "ok": False, "target": channel_target(url),
                               "tries": 0}
    try:
        import apprise  # the optional extra qinglong[notify]; never imported by serve
    except ImportError:
        return {**view, "error": "Apprise is not installed: pip install 'qinglong[notify]'",
                "duration_ms": _ms_since(began)}
    from qinglong.shared.backoff import retry_delay_s

    sender = apprise.Apprise()
    if not sender.add(url):
        return {**view, "error": "not a URL Apprise knows", "duration_ms": _ms_since(began)}
    title = f"ql3: {facts.get('task')} {facts.get('status')}"
    body = str(facts.get("message") or title)
    tries = 0
    while True:
        tries += 1
        try:
            ok = bool(sender.notify(title=title, body=body))
        except Exception:  # a plugin's failure is an outcome, never a crash of the child
            ok = False
        if ok:
            return {**view, "ok": True, "tries": tries, "duration_ms": _ms_since(began)}
        delay = retry_delay_s(tries, base_s=RETRY_BASE_S, cap_s=RETRY_CAP_S)
        if time.monotonic() - began + delay >= timeout_s:
            return {**view, "tries": tries, "error": "delivery failed",
                    "duration_ms": _ms_since(began)}
        time.sleep(delay)


def handle(request: dict[str, Any]) -> list[dict[str, object]]:
    """Send every channel at once; one view each, in order (webhook first)."""
    facts = request["facts"]
    timeout_s = float(request["timeout_s"])
    jobs: list[tuple[str, Any]] = []
    if request.get("webhook"):
        jobs.append(("webhook", lambda: post_webhook(str(request["webhook"]), facts, timeout_s)))
    for url in request.get("urls") or ():
        jobs.append((channel_target(str(url)),
                     lambda u=str(url): push_apprise(u, facts, timeout_s)))
    results: list[dict[str, object] | None] = [None] * len(jobs)

    def run(index: int, job: Any) -> None:
        results[index] = job()

    threads = [threading.Thread(target=run, args=(i, job), daemon=True)
               for i, (_, job) in enumerate(jobs)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    for thread in threads:
        thread.join(max(0.0, timeout_s + 1 - (time.monotonic() - began)))
    out: list[dict[str, object]] = []
    for (name, _), result in zip(jobs, results, strict=True):
        if result is not None:
            out.append(result)
            continue
        channel = name.partition("://")[0]
        late: dict[str, object] = {"channel": channel, "ok": False, "error": "timed out",
                                   "timed_out": True}
        if channel != "webhook":
            late["target"] = name
        out.append(late)
    return out


def main() -> int:
    """Read the request from stdin, write the outcomes to stdout; exit 0 (2: bad request)."""
    try:
        request = json.loads(sys.stdin.buffer.read())
    except ValueError:
        return 2
    sys.stdout.write(json.dumps(handle(request)))
    sys.stdout.flush()
    os._exit(0)  # a plugin thread past its bound must not hold the exit


if __name__ == "__main__":
    raise SystemExit(main())
