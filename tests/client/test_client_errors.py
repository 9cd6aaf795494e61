"""The error mapping of ``ql3 cluster``'s HTTP client (``client/http.py``; issue 13 item 2):
every failure class becomes one typed error with one clear line, exit-code class included
(ValidationError/NotFoundError → 2, other QinglongError → 1), the token never in a message,
and replicas tried in order without re-sending a write that may have landed. Answers come
from ``httpx.MockTransport``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

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
from qinglong.client.http import ControlClient, shown_url
from qinglong.shared.errors import NotFoundError, QinglongError, ValidationError
from qinglong.shared.run_refs import AmbiguousRunError, NoSuchRunError

TOKEN = "ql3_" + "s" * 43
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler, urls: tuple[str, ...] = ("http://c1:8080",)) -> ControlClient:
    return ControlClient(list(urls), TOKEN, timeout_s=2, transport=httpx.MockTransport(handler))


def answer(status: int, code: str | None = None, message: str = "m", **extra: Any
           ) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/readyz":
            return httpx.Response(503, json={"ready": False, "reasons": ["migration_pending"],
                                             "degraded": []})
        body = {"error": {"code": code, "message": message, **extra}} if code else {}
        return httpx.Response(status, json=body)

    return handler


def failure(status: int, code: str | None = None, message: str = "m", *,
            task: str | None = None, run: str | None = None, **extra: Any) -> QinglongError:
    with pytest.raises(QinglongError) as caught:
        client(answer(status, code, message, **extra)).get("/v1/x", task=task, run=run)
    assert TOKEN not in str(caught.value)
    return caught.value


def test_401_says_the_token_was_rejected_and_names_the_variable() -> None:
    error = failure(401, "unauthenticated", "the token is unknown or revoked")
    assert isinstance(error, TokenRejectedError) and not isinstance(error, ValidationError)
    assert str(error) == ("token rejected by control at http://c1:8080: set QL3_TOKEN to a "
                          "valid token")


def test_403_names_the_scope_the_token_lacks() -> None:
    error = failure(403, "forbidden", "this token lacks the admin scope")
    assert isinstance(error, ScopeError)
    assert str(error) == "forbidden: this token lacks the admin scope (control at http://c1:8080)"


def test_404_of_a_task_or_a_run_names_what_was_asked_and_is_a_usage_error() -> None:
    task = failure(404, "task_not_found", "no live task has this name", task="nightly")
    assert isinstance(task, ControlNotFoundError) and isinstance(task, NotFoundError)
    assert str(task) == "no such task 'nightly'"
    run = failure(404, "run_not_found", "no run matches this reference", run="nightly#9")
    assert isinstance(run, NoSuchRunError) and str(run) == "no such run 'nightly#9'"
    pending = failure(404, "log_pending", "the attempt has not finished")
    assert isinstance(pending, ControlNotFoundError) and pending.error_code == "log_pending"


def test_404_without_a_code_is_an_endpoint_this_control_lacks() -> None:
    error = failure(404, "not_found", "not found")
    assert isinstance(error, ControlFailedError)
    assert "has no such endpoint" in str(error)


@pytest.mark.parametrize(("code", "task", "run", "line"), [
    ("task_exists", "nightly", None, "task 'nightly' already exists"),
    ("run_refused", "nightly", None, "run refused: a run of 'nightly' is queued or running and "
                                     "its concurrency policy is forbid"),
    ("already_finished", None, "nightly#2", "run 'nightly#2' has already finished"),
])
def test_409_says_what_conflicts(code: str, task: str | None, run: str | None,
                                 line: str) -> None:
    error = failure(409, code, "x", task=task, run=run)
    assert isinstance(error, ControlConflictError) and not isinstance(error, ValidationError)
    assert (str(error), error.error_code) == (line, code)


def test_410_says_when_the_log_was_retired() -> None:
    error = failure(410, "log_retired", "retired", retired_at="2026-12-01T01:09:01+00:00",
                    outcome="deleted")
    assert isinstance(error, LogRetiredError)
    assert error.retired_at == "2026-12-01T01:09:01+00:00" and error.outcome == "deleted"
    assert str(error).startswith("the log was retired by retention at 2026-12-01 ")
    assert str(error).endswith(" (deleted)")


def test_422_is_bad_input_and_run_reference_codes_keep_the_local_wording() -> None:
    error = failure(422, "invalid_request", "invalid fields: body.schedule: not a valid cron")
    assert isinstance(error, ControlRejectedError) and isinstance(error, ValidationError)
    assert str(error) == "control refused the request: --schedule: not a valid cron"
    ambiguous = failure(422, "ambiguous_run", "several", run="abc123")
    assert isinstance(ambiguous, AmbiguousRunError)
    invalid = failure(422, "invalid_run_ref", "not a run reference", run="zz")
    assert isinstance(invalid, NoSuchRunError) and "TASK#N" in str(invalid)


def test_a_422_names_each_field_as_the_command_line_does() -> None:
    words = "use 1-128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
    error = failure(422, "invalid_request", f"invalid fields: body.name: {words}")
    assert str(error) == f"control refused the request: task name: {words}"
    error = failure(422, "invalid_request", "invalid fields: body.argv.1: contains NUL; "
                    "body.env.* (key): use 1-128 ASCII letters; body.env.*.value: too long; "
                    "body.labels.*: use 1-63; body.timeout_s: not an integer; "
                    "query.task: use 1-128; body.enabled: not a boolean")
    assert str(error) == (
        "control refused the request: the command: contains NUL; --env/--secret-env name: "
        "use 1-128 ASCII letters; --env/--secret-env value: too long; --label value: use "
        "1-63; --timeout: not an integer; --task: use 1-128; body.enabled: not a boolean")
    other = failure(422, "invalid_request", "give bundle_digest and entry_point together")
    assert str(other) == ("control refused the request: give bundle_digest and entry_point "
                          "together")


def test_503_names_the_readiness_reason() -> None:
    error = failure(503, "database_unavailable", "the database is unavailable; retry later")
    assert isinstance(error, ControlNotReadyError)
    assert error.reasons == ["migration_pending"]
    assert str(error) == ("control at http://c1:8080 is not ready: migration_pending; retry "
                          "later")
    log = failure(503, "log_unavailable", "the log is unavailable; retry later")
    assert str(log) == ("control at http://c1:8080 cannot serve this now: the log is "
                        "unavailable; retry later (log_unavailable)")


def test_500_is_a_failure_of_control() -> None:
    error = failure(500, "internal", "internal error")
    assert isinstance(error, ControlFailedError)
    assert str(error) == "control at http://c1:8080 failed: HTTP 500 (internal)"


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def test_no_replica_reachable_is_one_line_naming_them() -> None:
    with pytest.raises(ControlUnreachableError) as caught:
        client(refused, ("http://c1:1", "http://c2:2")).get("/v1/tasks")
    assert str(caught.value) == "cannot reach control at http://c1:1, http://c2:2: " \
                                "connection refused"


def test_a_read_goes_to_the_next_replica_and_stays_there() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "c1":
            return refused(request)
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        return httpx.Response(200, json={"ok": True})

    api = client(handler, ("http://c1:1", "http://c2:2"))
    assert api.get("/v1/tasks") == {"ok": True}
    assert api.get("/v1/tasks") == {"ok": True}
    assert seen == ["c1", "c2", "c2"]


def test_a_read_passes_a_replica_answering_503_to_the_next() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "c1":
            return httpx.Response(503, json={"error": {"code": "database_unavailable",
                                                       "message": "m"}})
        return httpx.Response(200, json={"ok": True})

    assert client(handler, ("http://c1:1", "http://c2:2")).get("/v1/runs") == {"ok": True}


def test_a_write_that_may_have_landed_is_never_sent_again() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ControlUnreachableError) as caught:
        client(handler, ("http://c1:1", "http://c2:2")).send("POST", "/v1/tasks/x/run")
    assert seen == ["c1"]
    assert str(caught.value) == "cannot reach control at http://c1:1: no answer within 2 s"


def test_a_write_refused_at_connect_goes_to_the_next_replica() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "c1":
            return refused(request)
        return httpx.Response(201, json={"id": "r", "number": 1})

    status, body = client(handler, ("http://c1:1", "http://c2:2")).send("POST", "/v1/x")
    assert (status, body) == (201, {"id": "r", "number": 1})


def test_without_a_token_nothing_is_sent_and_it_is_a_usage_error() -> None:
    for token in (None, "", "  "):
        with pytest.raises(TokenMissingError) as caught:
            ControlClient("http://c1:1", token)
        assert isinstance(caught.value, ValidationError) and "QL3_TOKEN" in str(caught.value)


def test_urls_are_shown_without_user_info() -> None:
    assert shown_url("http://user:pw@c1:8080/") == "http://c1:8080"
    with pytest.raises(ControlUnreachableError) as caught:
        client(refused, ("http://user:pw@c1:1",)).get("/v1/tasks")
    assert "pw" not in str(caught.value) and "user" not in str(caught.value)


def test_pages_are_followed_up_to_the_limit() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        start = int(cursor) if cursor else 0
        size = int(request.url.params["limit"])
        items = list(range(start, min(start + size, 5)))
        return httpx.Response(200, json={"items": items, "next_cursor": str(items[-1] + 1)
                                         if len(items) == size else None})

    assert client(handler).items("/v1/runs") == [0, 1, 2, 3, 4]
    assert client(handler).items("/v1/runs", limit=3) == [0, 1, 2]


def test_a_keyed_write_whose_answer_was_lost_is_sent_again_with_the_same_key() -> None:
    """Run now's Idempotency-Key (docs/protocols.md §4.5): a lost answer is retried at the
    next replica, and with one base URL at the same one, under the same key."""
    for urls, again in ((("http://c1:1", "http://c2:2"), "c2"), (("http://c1:1",), "c1")):
        seen: list[tuple[str | None, str | None]] = []

        def handler(request: httpx.Request, seen: list[Any] = seen) -> httpx.Response:
            seen.append((request.url.host, request.headers.get("Idempotency-Key")))
            if len(seen) == 1:
                raise httpx.ReadTimeout("timed out", request=request)
            return httpx.Response(201, json={"id": "r", "number": 1})

        status, body = client(handler, urls).send("POST", "/v1/tasks/x/run",
                                                  idempotency_key="k-1")
        assert (status, body) == (201, {"id": "r", "number": 1})
        assert seen == [("c1", "k-1"), (again, "k-1")]
