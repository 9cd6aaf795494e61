"""``ControlClient``: the HTTP client ``ql3 cluster`` talks to control with (docs/protocols.md
§4.5; the routes of ``control/qinglong/control/api``).

One ``httpx.Client`` per control base URL, each sending ``Authorization: Bearer <token>``
(the token goes to those URLs only; redirects are never followed). Several base URLs are
replicas sharing one database: a request goes to the current one and moves to the next when
it cannot connect — for reads also on any transport error (a read timeout, a reset) and on
502/503/504 — and the URL that answered stays current. A write that may have reached a
replica (anything but a refused connection) is never sent again, unless it carries an
``Idempotency-Key`` (``idempotency_key``: run now, docs/protocols.md §4.5): such a write is
sent again with the same key like a read, at least once more even with one base URL, and
control answers a retry with the first request's run.

Every answer other than 2xx becomes one typed error (``errors.py``), by status and control's
stable ``error.code``:

=====  ==========================================================================
 401   TokenRejectedError (exit 1)
 403   ScopeError, with control's message (``this token lacks the admin scope``)
 404   ``task_not_found`` → ControlNotFoundError ``no such task 'x'`` (exit 2);
       ``run_not_found`` → NoSuchRunError ``no such run 'backup#9'`` (exit 2);
       an unknown bundle → ControlNotFoundError ``no script bundle 'ab12…'`` (exit 2)
 409   ControlConflictError (``task_exists``, ``task_changed``, ``run_refused``,
       ``already_finished``, ``bundle_in_use``)
 410   LogRetiredError, with when and how the log was retired
 413,  ControlRejectedError (exit 2), with a refused bundle's ``reason``;
 422   ``ambiguous_run`` → AmbiguousRunError, ``invalid_run_ref`` → NoSuchRunError
       with the forms' hint; ``invalid_request`` names each field as the command line
       does (``body.name`` → ``task name``, ``body.schedule`` → ``--schedule``)
 503   ControlNotReadyError, with ``/readyz``'s named reasons (``database_unavailable``…)
 5xx   ControlFailedError
=====  ==========================================================================

No connection at all is ControlUnreachableError (``cannot reach control at URL: connection
refused``). No message carries the token or a request body.

httpx is imported where a client is made or a request fails, not with this module: the
``ql3 cluster`` commands import it for their option defaults and types, and their ``--help``
loads no HTTP library (docs/architecture.md §1).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from qinglong.client.errors import (
    ControlConflictError,
    ControlFailedError,
    ControlNotFoundError,
    ControlNotReadyError,
    ControlRejectedError,
    ControlUnreachableError,
    LogRetiredError,
    ScopeError,
    TokenMissingError,
    TokenRejectedError,
)
from qinglong.shared.display import when
from qinglong.shared.errors import QinglongError
from qinglong.shared.run_refs import FORMS_HINT, AmbiguousRunError, NoSuchRunError

if TYPE_CHECKING:
    import httpx

DEFAULT_TIMEOUT_S = 10.0
FAILOVER_STATUSES = (502, 503, 504)
PAGE_LIMIT = 200  # the API's largest page
IDEMPOTENT = frozenset({"GET", "HEAD"})


def shown_url(url: str) -> str:
    """``url`` as printed: without user-info (``http://u:p@h`` → ``http://h``)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host)).rstrip("/")


def failure_reason(exc: httpx.TransportError, timeout_s: float) -> str:
    """A transport failure in words: the operating system's (``connection refused``,
    ``name or service not known``), or which timeout passed."""
    import httpx

    if isinstance(exc, httpx.ConnectTimeout):
        return f"no connection within {timeout_s:g} s"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout_s:g} s"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            text = cause.strerror
            return text[:1].lower() + text[1:]
        cause = cause.__cause__ or cause.__context__
    text = str(exc) or type(exc).__name__
    return text.removeprefix("[Errno ").split("] ", 1)[-1].lower()


def unreachable(failures: list[tuple[str, str]]) -> ControlUnreachableError:
    """One line for replicas that could not be reached: ``cannot reach control at A, B:
    connection refused`` when they failed alike, else each URL with its own reason."""
    reasons = {reason for _, reason in failures}
    if len(reasons) == 1:
        return ControlUnreachableError(", ".join(u for u, _ in failures), reasons.pop())
    return ControlUnreachableError(", ".join(u for u, _ in failures),
                                   "; ".join(f"{u}: {r}" for u, r in failures), per_url=True)


def _error(response: httpx.Response) -> dict[str, Any]:
    """Control's ``{"error": {...}}`` of a response ({} when it has none)."""
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


class ControlClient:
    """Calls of the control API for ``ql3 cluster``.

    ``base_urls``: one control base URL or several replicas' (``http(s)://host:port``, no
    ``/v1``), tried in order (see the module docstring). ``token``: the bearer token
    (``QL3_TOKEN``); empty raises TokenMissingError (exit 2) before anything is sent.
    ``timeout_s`` bounds each connect and each read. ``transport``: an httpx transport
    (tests use ``httpx.MockTransport``). Raises ValueError for an empty ``base_urls``.
    """

    def __init__(self, base_urls: str | Sequence[str], token: str | None, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("at least one control base URL is needed")
        if not token or not token.strip():
            raise TokenMissingError
        import httpx

        self.urls = [u.rstrip("/") for u in urls]
        self.timeout_s = timeout_s
        self._https = [httpx.Client(base_url=u, timeout=timeout_s, follow_redirects=False,
                                    transport=transport,
                                    headers={"Authorization": f"Bearer {token.strip()}"})
                       for u in self.urls]
        self._probe = httpx.Client(timeout=min(timeout_s, 3.0), transport=transport)
        self._current = 0

    def close(self) -> None:
        """Close every connection pool (idempotent)."""
        for http in (*self._https, self._probe):
            http.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- requests -------------------------------------------------------------------------

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                body: Any = None, content: bytes | None = None,
                content_type: str = "application/octet-stream", task: str | None = None,
                run: str | None = None, script: str | None = None,
                timeout_s: float | None = None,
                idempotency_key: str | None = None) -> httpx.Response:
        """``method path`` (``/v1/...``) answered 2xx, through the first replica that takes
        it. ``body`` is sent as JSON; ``content`` (instead) as raw bytes of ``content_type``
        (a bundle's gzip tar). ``task`` / ``run`` / ``script`` (a bundle digest): what the
        request is about, named in error lines (``no such task 'x'``). ``timeout_s``
        replaces the client's read timeout for this request (a long poll).
        ``idempotency_key``: sent as ``Idempotency-Key``; the write is then retried as a
        read is (module docstring). Raises the typed errors of the module docstring."""
        import httpx

        idempotent = method.upper() in IDEMPOTENT or idempotency_key is not None
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        params = {k: v for k, v in (params or {}).items() if v is not None}
        last: httpx.Response | None = None
        last_url = ""
        failures: list[tuple[str, str]] = []  # (shown URL, reason) of each replica tried
        tries = len(self.urls) if idempotency_key is None else max(2, len(self.urls))
        for step in range(tries):
            index = (self._current + step) % len(self.urls)
            url = shown_url(self.urls[index])
            try:
                extra: dict[str, Any] = {} if timeout_s is None else {
                    "timeout": httpx.Timeout(self.timeout_s, read=timeout_s)}
                response = self._https[index].request(
                    method, path, params=params, **extra,
                    **({"json": body, "headers": headers} if content is None else {
                        "content": content,
                        "headers": headers | {"Content-Type": content_type}}))
            except httpx.ConnectError as exc:  # nothing was sent: the next replica may take it
                failures.append((url, failure_reason(exc, self.timeout_s)))
                continue
            except httpx.TransportError as exc:
                failures.append((url, failure_reason(exc, self.timeout_s)))
                if idempotent:
                    continue
                raise unreachable(failures[-1:]) from None
            if response.status_code in FAILOVER_STATUSES and idempotent:
                last, last_url = response, self.urls[index]
                continue
            self._current = index
            return self._checked(response, self.urls[index], task=task, run=run,
                                 script=script)
        if last is not None:  # a replica answered 502/503/504: say why rather than "refused"
            return self._checked(last, last_url, task=task, run=run, script=script)
        raise unreachable(failures)

    def get(self, path: str, *, params: dict[str, Any] | None = None,
            task: str | None = None, run: str | None = None,
            script: str | None = None) -> Any:
        """The JSON of ``GET path``."""
        return self._json(self.request("GET", path, params=params, task=task, run=run,
                                       script=script))

    def send(self, method: str, path: str, body: Any = None, *, task: str | None = None,
             run: str | None = None, script: str | None = None,
             idempotency_key: str | None = None) -> tuple[int, Any]:
        """``(status, JSON or None)`` of a write (POST, PATCH, DELETE); with
        ``idempotency_key``, retried under that key (``request``)."""
        response = self.request(method, path, body=body, task=task, run=run, script=script,
                                idempotency_key=idempotency_key)
        return response.status_code, (self._json(response) if response.content else None)

    def send_content(self, method: str, path: str, content: bytes, content_type: str, *,
                     script: str | None = None) -> tuple[int, Any]:
        """``(status, JSON or None)`` of a write whose body is ``content`` (raw bytes of
        ``content_type``, such as a bundle's gzip tar) rather than JSON."""
        response = self.request(method, path, content=content, content_type=content_type,
                                script=script)
        return response.status_code, (self._json(response) if response.content else None)

    def items(self, path: str, params: dict[str, Any] | None = None, *,
              limit: int | None = None, task: str | None = None) -> list[Any]:
        """Every item of a keyset-paged list (``items`` / ``next_cursor``), following
        cursors, at most ``limit`` items (None: all)."""
        found: list[Any] = []
        cursor = None
        while True:
            size = PAGE_LIMIT if limit is None else min(PAGE_LIMIT, limit - len(found))
            page = self.get(path, params={**(params or {}), "limit": size, "cursor": cursor},
                            task=task)
            found += page["items"]
            cursor = page.get("next_cursor")
            if cursor is None or (limit is not None and len(found) >= limit):
                return found

    # -- answers --------------------------------------------------------------------------

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise ControlFailedError(f"control at {shown_url(str(response.url))} answered "
                                     "something that is not JSON") from None

    def _checked(self, response: httpx.Response, url: str, *, task: str | None,
                 run: str | None, script: str | None = None) -> httpx.Response:
        status = response.status_code
        if 200 <= status < 300:
            return response
        raise self.error_for(response, shown_url(url), task=task, run=run, script=script)

    def error_for(self, response: httpx.Response, url: str, *, task: str | None = None,
                  run: str | None = None, script: str | None = None) -> QinglongError:
        """The typed error of a non-2xx ``response`` from control at ``url``."""
        status = response.status_code
        error = _error(response)
        code = str(error.get("code") or "")
        message = str(error.get("message") or f"HTTP {status}")
        if status == 401:
            return TokenRejectedError(url)
        if status == 403:
            return ScopeError(f"forbidden: {message} (control at {url})", url)
        if status == 404:
            return self._not_found(code, message, url, task=task, run=run, script=script)
        if status == 409:
            return ControlConflictError(_conflict(code, message, task=task, run=run,
                                                  script=script), code)
        if status == 410:
            retired = error.get("retired_at")
            outcome = error.get("outcome")
            return LogRetiredError(f"the log was retired by retention at {when(retired)}"
                                   f" ({outcome or 'retired'})", retired, outcome)
        if status == 422 and run is not None and code == "ambiguous_run":
            return AmbiguousRunError(run)
        if status == 422 and run is not None and code == "invalid_run_ref":
            return NoSuchRunError(run, FORMS_HINT)
        if code in ("bundle_invalid", "bundle_too_large"):
            return ControlRejectedError(f"control refused the bundle: {message} "
                                        f"({error.get('reason') or code})")
        if status == 422 and code == "invalid_request":
            return ControlRejectedError(f"control refused the request: {refused(message)}")
        if 400 <= status < 500:
            return ControlRejectedError(f"control refused the request: {message}")
        if status == 503:
            return self._not_ready(code, message, url)
        return ControlFailedError(f"control at {url} failed: HTTP {status}"
                                  + (f" ({code})" if code else ""), url)

    @staticmethod
    def _not_found(code: str, message: str, url: str, *, task: str | None,
                   run: str | None, script: str | None = None) -> QinglongError:
        if code == "task_not_found" and task is not None:
            return ControlNotFoundError(f"no such task {task!r}", code)
        if code == "run_not_found" and run is not None:
            return NoSuchRunError(run)
        if code == "not_found" and script is not None and message != "not found":
            return ControlNotFoundError(f"no script bundle {script!r}", "bundle_not_found")
        if code in ("not_found", ""):  # a route this control does not have
            return ControlFailedError(f"control at {url} has no such endpoint (an older "
                                      "release?)", url)
        return ControlNotFoundError(f"{message} ({code})", code)

    def _not_ready(self, code: str, message: str, url: str) -> ControlNotReadyError:
        """503: ``database_unavailable`` (or no code) asks ``/readyz`` why; another code
        (a log that cannot be served now) is said as control says it."""
        if code not in ("", "database_unavailable"):
            return ControlNotReadyError(f"control at {url} cannot serve this now: {message} "
                                        f"({code})", url, [])
        import httpx

        reasons: list[str] = []
        try:
            ready = self._probe.get(f"{url}/readyz").json()
            reasons = [str(r) for r in ready.get("reasons", [])]
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        why = ", ".join(reasons) or code or "HTTP 503"
        return ControlNotReadyError(f"control at {url} is not ready: {why}; retry later",
                                    url, reasons)


# The API's field paths of a 422 (``invalid fields: body.name: <reason>; …``) as the
# command line names them; a path not listed is said as control says it.
FIELD_NAMES = {
    "body.name": "task name", "path.name": "task name", "query.task": "--task",
    "body.schedule": "--schedule", "body.timezone": "--timezone", "body.timeout_s": "--timeout",
    "body.max_attempts": "--max-attempts", "body.concurrency_policy": "--concurrency",
    "body.cwd": "--cwd", "body.shell": "--shell", "body.argv": "the command",
    "body.env": "--env/--secret-env", "body.env.* (key)": "--env/--secret-env name",
    "body.env.*.value": "--env/--secret-env value",
    "body.labels": "--label", "body.labels.* (key)": "--label key",
    "body.labels.*": "--label value", "body.bundle_digest": "--bundle",
    "body.entry_point": "--entry-point", "query.status": "--status", "query.limit": "--limit",
    "query.state": "--state",
}
INVALID_FIELDS = "invalid fields: "


def field_name(path: str) -> str:
    """An API field path as the command line names it: ``body.name`` → ``task name``,
    ``body.env.* (key)`` → ``--env/--secret-env name``, ``body.argv.2`` → ``the command``;
    the longest listed prefix wins (``body.env.*.secret`` → ``--env/--secret-env``)."""
    key = " ".join(".".join(p for p in part.split(".") if not p.isdigit())
                   for part in path.split(" "))
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        name = FIELD_NAMES.get(".".join(parts[:end]))
        if name is not None:
            return name
    return path


def refused(message: str) -> str:
    """Control's 422 message with each field path as the command line names it
    (``task name: use 1-128 ASCII letters, …``); other messages as they are."""
    if not message.startswith(INVALID_FIELDS):
        return message
    entries = []
    for entry in message[len(INVALID_FIELDS):].split("; "):
        path, sep, why = entry.partition(": ")
        entries.append(f"{field_name(path)}: {why}" if sep else entry)
    return "; ".join(entries)


def _conflict(code: str, message: str, *, task: str | None, run: str | None,
              script: str | None = None) -> str:
    if code == "task_exists" and task is not None:
        return f"task {task!r} already exists"
    if code == "task_changed" and task is not None:
        return (f"task {task!r} was changed by someone else meanwhile; nothing was "
                "changed: run the edit again")
    if code == "run_refused" and task is not None:
        if "#" in message:  # control names the run in progress: `run 京东签到#3 is running…`
            return f"run refused: {message}"
        return (f"run refused: a run of {task!r} is queued or running and its concurrency "
                "policy is forbid")
    if code == "already_finished" and run is not None:
        return f"run {run!r} has already finished"
    if code == "bundle_in_use" and script is not None:
        return f"script bundle {script!r} is in use: {message}"
    return f"{message} ({code})" if code else message
