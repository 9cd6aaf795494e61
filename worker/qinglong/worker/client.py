"""The worker's HTTP client of control (docs/protocols.md §4.2, routes and shapes of
shared/wire.py).

Every call posts one wire message and decodes the answer with the wire type's strict
``from_json``. Connection errors, timeouts and 5xx are retried with exponential backoff and
jitter (tenacity), and never past the caller's ``deadline`` (a ``clock.now()`` reading,
s): for an attempt's writes that is its self-fencing deadline, so a retry never outlives the
lease. Control answers an already-applied write as the first time, so replays are safe.
409 => LeaseLostError, 401/403 => ControlAuthError, 422 and other 4xx => ControlRejectedError,
out of time => ControlUnavailableError. The bearer token goes only to control's base URLs.

Several base URLs (control replicas sharing one database: any replica can take any call,
leases live in the database): every request goes to the current URL; a connection failure
(any transport error: refused, reset, connect or read timeout) or 502/503/504 (a proxy or a
draining replica) moves the client to the next URL, and the retry goes there within the same
deadline. A 500 is retried on the same URL.

Token rotation: with ``reload_token`` (the worker's token came from ``--token-file``), a 401
makes the client read the token again, once. A token that changed (the operator replaced
the file at a rotation) replaces the old one for every later request and the
refused request is sent again at once with it (control refuses a request before handling
it, so nothing was applied); an unchanged or unreadable file leaves the 401 as it was
(``token_refused``). Concurrent requests refused with the old token after another thread
switched just send again with the new one. The token is never logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
    wait_random,
)

from qinglong.shared import wire
from qinglong.shared.errors import ValidationError
from qinglong.worker import clock
from qinglong.worker.errors import (
    ControlAuthError,
    ControlRejectedError,
    ControlUnavailableError,
    LeaseLostError,
    TokenError,
    WireAnswerError,
)

W = TypeVar("W", bound=wire._Wire)  # the shared base of every wire type
log = logging.getLogger("qinglong.worker")
FAILOVER_WARN_EVERY_S = 30.0  # at most one failover warning per this many seconds

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BUDGET_S = 30.0
ROUTES = {
    "register": "/v1/worker/register",
    "claim": "/v1/worker/claim",
    "started": "/v1/worker/started",
    "heartbeat": "/v1/worker/heartbeat",
    "log_upload": "/v1/worker/log-upload",
    "log_chunk": "/v1/worker/log-chunk",
    "bundle": "/v1/worker/bundle",
    "complete": "/v1/worker/complete",
    "complete_no_output": "/v1/worker/complete-no-output",
    "stopped": "/v1/worker/stopped",
}


FAILOVER_STATUSES = (502, 503, 504)
V1_RETRY_S = 60.0  # a replica that answered 404 to a wire-2 route is asked again after this


class _TransientError(Exception):
    """A failure worth retrying: connection error, timeout or 5xx (``cause`` names it);
    ``failover`` when the next URL should take the retry."""

    def __init__(self, cause: str, failover: bool = False) -> None:
        super().__init__(cause)
        self.cause = cause
        self.failover = failover


def _error_code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("code") if isinstance(body, dict) else None
    if code is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
    return code if isinstance(code, str) else None


class ControlClient:
    """One httpx.Client per control base URL, with the worker's bearer token.

    ``base_urls`` is one base URL or several (replicas of one control, tried in order from
    the current one on connection failures; see the module docstring). ``timeout_s`` caps
    one request (connect, read, write, pool); ``transport`` lets tests route through their
    own httpx transport. Thread-safe (httpx.Client is; the current URL is under a lock).
    ``token_refused`` is set once control answered 401 to any call (and a ``reload_token``
    gave no other token): the token is unknown or revoked, and nothing this worker sends
    can succeed any more. ``reload_token`` returns the token as it is now (the token file
    read again) or raises TokenError; see the module docstring.
    Raises ValueError when ``base_urls`` is empty.
    """

    def __init__(self, base_urls: str | Sequence[str], token: str, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None,
                 reload_token: Callable[[], str] | None = None) -> None:
        urls = [base_urls] if isinstance(base_urls, str) else list(base_urls)
        if not urls:
            raise ValueError("at least one control base URL is needed")
        self._timeout_s = timeout_s
        self.urls = [u.rstrip("/") for u in urls]
        self._https = [httpx.Client(
            base_url=u, timeout=timeout_s, follow_redirects=False, transport=transport,
        ) for u in self.urls]
        self._current = 0
        self._switch = threading.Lock()
        self._warned_at: float | None = None  # clock.now() of the last failover warning
        self._quiet_switches = 0  # switches since then, logged at debug only
        self._token = token
        self._reload_token = reload_token
        self._token_lock = threading.Lock()
        self.token_refused = threading.Event()
        self._v1_since: dict[str, float] = {}  # base URL -> clock.now() of its 404 to a v2 route

    @property
    def current_url(self) -> str:
        """The base URL the next request goes to."""
        with self._switch:
            return self.urls[self._current]

    def close(self) -> None:
        """Close the connection pools (idempotent)."""
        for http in self._https:
            http.close()

    def _fail_over(self, failed: int, cause: str) -> None:
        """Move past URL index ``failed`` unless another thread already did."""
        if len(self.urls) == 1:
            return
        with self._switch:
            if self._current != failed:
                return
            self._current = (failed + 1) % len(self.urls)
            nxt = self.urls[self._current]
            now = clock.now()
            loud = self._warned_at is None or now - self._warned_at >= FAILOVER_WARN_EVERY_S
            quiet = self._quiet_switches
            if loud:
                self._warned_at, self._quiet_switches = now, 0
            else:
                self._quiet_switches += 1
        if not loud:  # an outage of every replica would log one line per try
            log.debug("control at %s unreachable (%s); switching to %s",
                      self.urls[failed], cause, nxt)
            return
        more = f" ({quiet} more switches since the last such line)" if quiet else ""
        log.warning("control at %s unreachable (%s); switching to %s%s",
                    self.urls[failed], cause, nxt, more)

    def _renewed(self, refused: str) -> bool:
        """After a 401 to a request sent with token ``refused``: True when another token is
        to be used now (another thread switched already, or the token file holds a new
        one, which becomes the client's token); False when there is none (no file, the
        same token, or the file cannot be read: the 401 stands)."""
        with self._token_lock:
            if self._token != refused:
                return True
            if self._reload_token is None:
                return False
            try:
                fresh = self._reload_token()
            except TokenError as exc:
                log.warning("control refused the worker token (401); re-reading --token-file"
                            " failed: %s", exc)
                return False
            if fresh == refused:
                log.warning("control refused the worker token (401); --token-file holds the"
                            " same token")
                return False
            self._token = fresh
        log.info("control refused the worker token (401); --token-file holds a new one: "
                 "switching to the new token")
        return True

    def register(self, msg: wire.WorkerRegistration,
                 deadline: float | None = None) -> wire.WorkerRegistered:
        """POST /v1/worker/register. WireAnswerError when the answer's lease timing breaks
        heartbeat ≤ lease/3 (the message holds both numbers)."""
        return self._call("register", msg, wire.WorkerRegistered, deadline)

    def claim(self, msg: wire.ClaimRequest,
              deadline: float | None = None) -> tuple[list[wire.ClaimedAttempt], list[str]]:
        """POST /v1/worker/claim. Returns (attempts to run, reasons of refused ones): each
        attempt decodes on its own, so one with heartbeat > lease/3 is refused without
        refusing the others. Sends ``QL3-Wire: 2`` (wire.WIRE_HEADER): this worker decodes
        ``ClaimedAttempt.secret_names``."""
        attempts, refused, _waited = self.claim_waiting(msg, deadline, wait_ms=0)
        return attempts, refused

    def claim_waiting(self, msg: wire.ClaimRequest, deadline: float | None = None, *,
                      wait_ms: int, sent_at: list[float] | None = None,
                      ) -> tuple[list[wire.ClaimedAttempt], list[str], bool]:
        """``claim``, letting an empty claim wait up to ``wait_ms`` (> 0; header
        ``QL3-Claim-Wait``, docs/protocols.md §4.2 "Claims that wait") for work at control;
        the read timeout grows by the wait. The third item is True when control answered
        that it waited (its answer carries the header), so claiming again at once does not
        spin; False from an older control or a draining replica. ``sent_at`` receives the
        send time of the answered request (see ``_post``): the leases' first renewal."""
        headers = {wire.WIRE_HEADER: str(wire.WIRE_VERSION)}
        if wait_ms > 0:
            headers[wire.CLAIM_WAIT_HEADER] = str(wait_ms)
        seen: dict[str, str] = {}
        body = self._post(ROUTES["claim"], msg, deadline, headers,
                          read_timeout_s=self._timeout_s + wait_ms / 1000, seen=seen,
                          sent_at=sent_at)
        if not isinstance(body, dict) or set(body) != {"attempts"} or not isinstance(
                body["attempts"], list):
            raise WireAnswerError("ClaimAnswer: must be an object with a list 'attempts'")
        attempts: list[wire.ClaimedAttempt] = []
        refused: list[str] = []
        for item in body["attempts"]:
            try:
                attempts.append(wire.ClaimedAttempt.from_json(item))
            except ValidationError as exc:
                refused.append(str(exc))
        return attempts, refused, wait_ms > 0 and wire.CLAIM_WAIT_HEADER.lower() in seen

    def started(self, msg: wire.StartedReport, deadline: float) -> wire.Ack:
        """POST /v1/worker/started."""
        return self._call("started", msg, wire.Ack, deadline)

    def heartbeat(self, msg: wire.HeartbeatReport, deadline: float) -> wire.HeartbeatAnswer:
        """POST /v1/worker/heartbeat: extends the lease; the answer may ask to cancel."""
        return self._call("heartbeat", msg, wire.HeartbeatAnswer, deadline)

    def log_upload(self, msg: wire.LogUploadRequest, deadline: float) -> wire.LogUploadGrant:
        """POST /v1/worker/log-upload: a presigned PUT for the attempt's log object."""
        return self._call("log_upload", msg, wire.LogUploadGrant, deadline)

    def log_chunk(self, msg: wire.LogChunkBatch, deadline: float) -> wire.LogChunkAnswer:
        """POST /v1/worker/log-chunk: live output of the worker's attempts (docs/protocols.md
        §4.7). Per-chunk 200/409/416 come in the answer's results; a replica without the
        route answers 404 => ControlRejectedError (live_log.py stops streaming there). Raises
        WireAnswerError when the answer does not hold one result per chunk."""
        answer = self._call("log_chunk", msg, wire.LogChunkAnswer, deadline)
        if len(answer.results) != len(msg.chunks):
            raise WireAnswerError("LogChunkAnswer: one result per chunk expected")
        return answer

    def bundle(self, msg: wire.BundleRequest, deadline: float) -> wire.BundleGrant:
        """POST /v1/worker/bundle: a presigned GET of the attempt's script bundle (404
        ``bundle_not_found`` => ControlRejectedError)."""
        return self._call("bundle", msg, wire.BundleGrant, deadline)

    def complete(self, msg: wire.CompletionReport, deadline: float) -> wire.Ack:
        """POST /v1/worker/complete."""
        return self._call("complete", msg, wire.Ack, deadline)

    def v2_routes_ok(self) -> bool:
        """Whether to use the routes of wire 2 (``complete_no_output``): False for
        V1_RETRY_S after the current replica answered 404 to one (an older release: the v1
        routes then, i.e. grant, PUT and ``complete`` for an attempt without output)."""
        url = self.current_url
        with self._switch:
            since = self._v1_since.get(url)
            if since is not None and clock.now() - since >= V1_RETRY_S:
                del self._v1_since[url]
                since = None
        return since is None

    def complete_no_output(self, msg: wire.CompletionReport, deadline: float) -> wire.Ack:
        """POST /v1/worker/complete-no-output (``QL3-Wire: 2``): the attempt's output was
        empty and no log was put (``msg.log`` and ``msg.layout`` None). A replica without
        the route answers 404 => ControlRejectedError (status 404), and ``v2_routes_ok``
        is False for that replica for V1_RETRY_S."""
        try:
            body = self._post(ROUTES["complete_no_output"], msg, deadline,
                              {wire.WIRE_HEADER: str(wire.WIRE_VERSION)})
        except ControlRejectedError as exc:
            if exc.status == 404:
                with self._switch:
                    self._v1_since[self.urls[self._current]] = clock.now()  # it answered
            raise
        try:
            return wire.Ack.from_json(body)
        except ValidationError as exc:
            raise WireAnswerError(f"Ack: {exc}") from None

    def stopped(self, msg: wire.WorkerStopped, deadline: float | None = None) -> wire.Ack:
        """POST /v1/worker/stopped (the drain finished)."""
        return self._call("stopped", msg, wire.Ack, deadline)

    def _call(self, route: str, msg: wire._Wire, answer: type[W],
              deadline: float | None) -> W:
        body = self._post(ROUTES[route], msg, deadline)
        try:
            return answer.from_json(body)
        except ValidationError as exc:
            raise WireAnswerError(f"{answer.__name__}: {exc}") from None

    def _post(self, path: str, msg: wire._Wire, deadline: float | None,
              extra_headers: dict[str, str] | None = None, *,
              read_timeout_s: float | None = None, seen: dict[str, str] | None = None,
              sent_at: list[float] | None = None) -> Any:
        """POST ``msg`` with retries until ``deadline``; the answer's JSON. ``read_timeout_s``
        replaces the client's timeout per request (a waiting claim); ``seen`` receives the
        answer's ``QL3-*`` headers (names in lower case); ``sent_at`` receives, as its one
        item, the monotonic time (``clock.now()``, seconds) at which the answered request was
        sent — a retry's, not the first try's (a lease granted by that answer cannot have
        started before it: docs/protocols.md §4.2 "Claims that wait")."""
        if deadline is None:
            deadline = clock.now() + DEFAULT_BUDGET_S
        payload = msg.to_json()
        extra = extra_headers or {}
        timeout_s = self._timeout_s if read_timeout_s is None else read_timeout_s

        def once() -> Any:
            left = deadline - clock.now()
            if left <= 0:
                raise _TransientError("deadline passed")
            with self._switch:
                index = self._current
            try:
                token = self._token
                if sent_at is not None:
                    sent_at[:] = [clock.now()]
                response = self._https[index].post(
                    path, json=payload, headers={"Authorization": f"Bearer {token}", **extra},
                    timeout=min(timeout_s, left))
                if response.status_code == 401 and self._renewed(token):
                    left = deadline - clock.now()
                    if left <= 0:
                        raise _TransientError("deadline passed")
                    token = self._token  # once, with the new token
                    if sent_at is not None:
                        sent_at[:] = [clock.now()]
                    response = self._https[index].post(
                        path, json=payload, headers={"Authorization": f"Bearer {token}", **extra},
                        timeout=min(timeout_s, left))
                if seen is not None:
                    seen.clear()
                    seen.update({k.lower(): v for k, v in response.headers.items()
                                 if k.lower().startswith("ql3-")})
                return self._answer(response)
            except httpx.TransportError as exc:
                self._fail_over(index, type(exc).__name__)
                raise _TransientError(type(exc).__name__) from None
            except _TransientError as exc:
                if exc.failover:
                    self._fail_over(index, exc.cause)
                raise

        retrying = Retrying(
            retry=retry_if_exception_type(_TransientError),
            wait=wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.3),
            stop=stop_before_delay(max(0.0, deadline - clock.now())),
            reraise=True,
        )
        try:
            return retrying(once)
        except _TransientError as exc:
            raise ControlUnavailableError(exc.cause) from None

    def _answer(self, response: httpx.Response) -> Any:
        status = response.status_code
        if status >= 500:
            raise _TransientError(f"HTTP {status}", failover=status in FAILOVER_STATUSES)
        if status == 409:
            raise LeaseLostError("control answered 409: lease lost")
        if status in (401, 403):
            if status == 401:
                self.token_refused.set()
            raise ControlAuthError(status, _error_code(response))
        if status >= 300:
            raise ControlRejectedError(status, _error_code(response))
        try:
            return response.json()
        except ValueError:
            raise WireAnswerError("answer is not JSON") from None
