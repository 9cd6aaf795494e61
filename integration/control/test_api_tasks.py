"""Task routes over real PostgreSQL as the runtime role (docs/protocols.md §4.2, §4.5; issue 11
item 7): CRUD that keeps id and history, write-only secrets, soft delete, validation that
never echoes input, next fire times from the shared cron module, keyset pages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from api_world import ApiWorld

from qinglong.shared.names import NAME_RULE

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
SECRET = "s3cr3t-VALUE-7f1e"


def task(name: str = "backup", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "argv": ["/bin/echo", "hi"],
                            "schedule": "*/5 * * * *", "timezone": "Asia/Shanghai",
                            "env": {"TOKEN": {"value": SECRET, "secret": True},
                                    "MODE": {"value": "plain"}}}
    body.update(over)
    return body


def test_edit_keeps_id_and_history_and_moves_the_next_fire_time(api: ApiWorld) -> None:
    created = api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    assert created.status_code == 201, created.text
    first = created.json()
    assert first["next_fire_at"] is not None
    (version_before,) = api.sql("SELECT schedule_version FROM tasks WHERE id = %(i)s",
                                {"i": first["id"]})[0]
    edited = api.client.patch("/v1/tasks/backup", json={"schedule": "0 3 * * *",
                                                        "max_attempts": 3},
                              headers=api.as_("admin"))
    assert edited.status_code == 200, edited.text
    after = edited.json()
    assert after["id"] == first["id"] and after["max_attempts"] == 3
    assert after["version"] == first["version"] + 1
    fire = datetime.fromisoformat(after["next_fire_at"]).astimezone(UTC)
    assert (fire.hour, fire.minute) == (19, 0)  # 03:00 Asia/Shanghai
    (version_after,) = api.sql("SELECT schedule_version FROM tasks WHERE id = %(i)s",
                               {"i": first["id"]})[0]
    assert version_after == version_before + 1
    kinds = [(e["kind"], e["detail"].get("fields")) for e in after["history"]]
    assert kinds == [("edited", ["max_attempts", "schedule"]), ("created", None)]
    assert after["history"][0]["detail"]["by"] == "admin-token"


def test_secret_values_never_leave_the_api_nor_reach_history(api: ApiWorld) -> None:
    answers = [api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))]
    # keep the secret (value null), change the plain entry: the stored secret stays
    answers.append(api.client.patch(
        "/v1/tasks/backup", json={"env": {"TOKEN": {"value": None, "secret": True},
                                          "MODE": {"value": "other"}}},
        headers=api.as_("admin")))
    for scope in ("viewer", "operator", "admin"):
        answers.append(api.client.get("/v1/tasks/backup", headers=api.as_(scope)))
        answers.append(api.client.get("/v1/tasks", headers=api.as_(scope)))
    answers.append(api.client.post("/v1/tasks/backup/disable", headers=api.as_("operator")))
    answers.append(api.client.post("/v1/tasks/backup/enable", headers=api.as_("operator")))
    assert all(a.status_code in (200, 201) for a in answers), [a.text for a in answers]
    assert not [a.text for a in answers if SECRET in a.text]
    assert answers[1].json()["env"] == {"TOKEN": {"value": None, "secret": True},
                                        "MODE": {"value": "other", "secret": False}}
    (env,) = api.sql("SELECT env FROM tasks WHERE name = 'backup'")[0]
    assert env["TOKEN"] == {"value": SECRET, "secret": True}  # kept, not lost
    events = api.sql("SELECT kind, detail::text FROM task_events")
    assert len(events) == 4 and not [e for e in events if SECRET in e[1]]
    # a kept value keeps its secrecy: it cannot be downgraded to plain and then read
    api.client.patch("/v1/tasks/backup", json={"env": {"TOKEN": {"value": None}}},
                     headers=api.as_("admin"))
    again = api.client.get("/v1/tasks/backup", headers=api.as_("admin"))
    assert SECRET not in again.text and again.json()["env"]["TOKEN"]["secret"] is True


def test_delete_is_soft_frees_the_name_and_keeps_history(api: ApiWorld) -> None:
    first = api.client.post("/v1/tasks", json=task(), headers=api.as_("admin")).json()
    gone = api.client.delete("/v1/tasks/backup", headers=api.as_("admin"))
    assert gone.status_code == 204
    assert api.client.get("/v1/tasks/backup", headers=api.as_("viewer")).status_code == 404
    row = api.sql("SELECT deleted_at IS NOT NULL, next_fire_at FROM tasks WHERE id = %(i)s",
                  {"i": first["id"]})
    assert row == [(True, None)]
    assert [k for (k,) in api.sql("SELECT kind FROM task_events WHERE task_id = %(i)s"
                                  " ORDER BY at", {"i": first["id"]})] == ["created", "deleted"]
    again = api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    assert again.status_code == 201 and again.json()["id"] != first["id"]
    dup = api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    assert (dup.status_code, dup.json()["error"]["code"]) == (409, "task_exists")


def test_disable_clears_and_enable_recomputes_the_next_fire_time(api: ApiWorld) -> None:
    api.client.post("/v1/tasks", json=task(schedule="* * * * * *"), headers=api.as_("admin"))
    off = api.client.post("/v1/tasks/backup/disable", headers=api.as_("operator")).json()
    assert (off["enabled"], off["next_fire_at"]) == (False, None)
    on = api.client.post("/v1/tasks/backup/enable", headers=api.as_("operator")).json()
    (now,) = api.sql("SELECT now()")[0]
    fire = datetime.fromisoformat(on["next_fire_at"])
    # the next whole second after the enable's database now(), which was just before ours
    assert on["enabled"] and fire.microsecond == 0
    assert -1.5 < (fire - now).total_seconds() <= 1
    kinds = [k for (k,) in api.sql("SELECT kind FROM task_events ORDER BY at")]
    assert kinds == ["created", "disabled", "enabled"]


@pytest.mark.parametrize(("field", "value"), [
    ("schedule", "99 * * * * MARK"), ("schedule", "61 * * * *"), ("timezone", "Mars/MARK"),
    ("env", {"1MARK": {"value": "x"}}), ("labels", {"MARK!": "x"}), ("max_attempts", 101),
    ("argv", ["/bin/MARK\x00"]), ("concurrency_policy", "MARK"), ("shell", "echo MARK"),
], ids=["cron-fields", "cron-range", "zone", "env-name", "label", "attempts", "nul",
        "policy", "argv-and-shell"])
def test_invalid_definitions_are_422_without_echoing_input(api: ApiWorld, field: str,
                                                           value: Any) -> None:
    answer = api.client.post("/v1/tasks", json=task(**{field: value}),
                             headers=api.as_("admin"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_request"
    assert "MARK" not in answer.text and SECRET not in answer.text
    assert api.sql("SELECT count(*) FROM tasks") == [(0,)]


def test_boot_is_refused_in_the_cluster_with_what_to_use_instead(api: ApiWorld) -> None:
    """``@boot`` (one run per start of the local ``serve``) has no meaning in the cluster:
    it was accepted and never fired; now a 422 that says what to use, for add and edit."""
    answer = api.client.post("/v1/tasks", json=task(schedule="@boot"), headers=api.as_("admin"))
    assert answer.status_code == 422, answer.text
    assert "@boot runs once per start of `ql3 local serve`" in answer.json()["error"]["message"]
    assert api.sql("SELECT count(*) FROM tasks") == [(0,)]
    assert api.client.post("/v1/tasks", json=task(), headers=api.as_("admin")
                           ).status_code == 201
    edit = api.client.patch("/v1/tasks/backup", json={"schedule": "@boot"},
                            headers=api.as_("admin"))
    assert (edit.status_code, edit.json()["error"]["code"]) == (422, "invalid_request")


def test_tasks_and_the_ledger_page_by_keyset(api: ApiWorld) -> None:
    for n in range(5):
        api.client.post("/v1/tasks", json=task(f"t{n}"), headers=api.as_("admin"))
    names, cursor = [], None
    while True:
        page = api.client.get("/v1/tasks", params={"limit": 2, **({"cursor": cursor}
                              if cursor else {})}, headers=api.as_("viewer")).json()
        names += [t["name"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert names == ["t0", "t1", "t2", "t3", "t4"]
    task_id = api.sql("SELECT id::text FROM tasks WHERE name = 't0'")[0][0]
    for minute in range(5):
        api.sql("INSERT INTO occurrences (id, task_id, outcome, first_slot, last_slot,"
                " slot_count) VALUES (gen_random_uuid(), %(t)s, 'skipped_active',"
                " now() + make_interval(mins => %(m)s), now() + make_interval(mins => %(m)s),"
                " 1)", {"t": task_id, "m": minute})
    seen: list[str] = []
    cursor = None
    while True:
        page = api.client.get("/v1/tasks/t0/occurrences", params={
            "limit": 2, **({"cursor": cursor} if cursor else {})},
            headers=api.as_("viewer")).json()
        seen += [o["id"] for o in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5 == len(set(seen)) and seen == sorted(seen, reverse=True)


def test_edit_refuses_null_for_required_fields_and_two_commands(api: ApiWorld) -> None:
    api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    for body in ({"max_attempts": None}, {"argv": ["a"], "shell": "b"}, {"timezone": None}):
        answer = api.client.patch("/v1/tasks/backup", json=body, headers=api.as_("admin"))
        assert answer.status_code == 422, (body, answer.text)
    switched = api.client.patch("/v1/tasks/backup", json={"shell": "echo hi"},
                                headers=api.as_("admin")).json()
    assert (switched["argv"], switched["shell"]) == (None, "echo hi")
    assert json.loads(api.sql("SELECT detail::text FROM task_events WHERE kind = 'edited'"
                              )[0][0])["fields"] == ["argv", "shell"]


def test_run_now_queues_a_numbered_manual_run_kept_after_delete(api: ApiWorld) -> None:
    api.client.post("/v1/tasks", json=task(concurrency_policy="allow"),
                    headers=api.as_("admin"))
    first = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator"))
    second = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator"))
    assert (first.status_code, second.status_code) == (201, 201), first.text
    assert (first.json()["number"], second.json()["number"]) == (1, 2)
    run = api.client.get(f"/v1/runs/{first.json()['id']}", headers=api.as_("viewer")).json()
    assert (run["status"], run["trigger"], run["task_name"]) == ("queued", "manual", "backup")
    assert api.client.post("/v1/tasks/backup/run", headers=api.as_("viewer")).status_code == 403
    api.client.delete("/v1/tasks/backup", headers=api.as_("admin"))
    assert api.client.get(f"/v1/runs/{first.json()['id']}",
                          headers=api.as_("viewer")).status_code == 200
    assert api.client.post("/v1/tasks/backup/run",
                           headers=api.as_("operator")).status_code == 404


@pytest.mark.parametrize("active", ["queued", "dispatching", "running"])
def test_run_now_of_a_forbid_task_with_an_active_run_is_refused_409(api: ApiWorld,
                                                                   active: str) -> None:
    """Policy forbid (the default): while a run is queued, dispatching or running, run now
    answers 409 ``run_refused`` and creates nothing (no run, no number, no event); once the
    run has ended, run now creates the next number."""
    api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    first = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator")).json()
    api.sql("UPDATE runs SET status = %(s)s WHERE id = %(i)s", {"s": active, "i": first["id"]})
    refused = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator"))
    assert refused.status_code == 409, refused.text
    assert refused.json() == {"error": {"code": "run_refused", "message":  # names the run
                                        f"run backup#1 is {active} and the task's "
                                        "concurrency policy is forbid"}}
    assert api.sql("SELECT count(*) FROM runs") == [(1,)]
    assert api.sql("SELECT count(*) FROM task_events WHERE kind = 'run_requested'") == [(1,)]
    api.sql("UPDATE runs SET status = 'succeeded', finished_at = now() WHERE id = %(i)s",
            {"i": first["id"]})
    again = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator"))
    assert (again.status_code, again.json()["number"]) == (201, 2), again.text


def test_run_now_of_a_replace_task_cancels_the_queued_run_and_stops_the_running_one(
        api: ApiWorld) -> None:
    """Policy replace: run now creates the run, ends the queued one ``cancelled`` (reason
    replaced, by the new run) and asks the running one to stop, as the scheduler does."""
    api.client.post("/v1/tasks", json=task(concurrency_policy="replace"),
                    headers=api.as_("admin"))
    running = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator")).json()
    api.sql("UPDATE runs SET status = 'running' WHERE id = %(i)s", {"i": running["id"]})
    queued = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator"))
    assert queued.status_code == 201, queued.text
    newest = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator"))
    assert (newest.status_code, newest.json()["number"]) == (201, 3), newest.text
    rows = dict(api.sql("SELECT number, status || ':' || (cancel_requested_at IS NOT NULL)::text"
                        " FROM runs"))
    assert rows == {1: "running:true", 2: "cancelled:true", 3: "queued:false"}
    got = api.client.get(f"/v1/runs/{queued.json()['id']}", headers=api.as_("viewer")).json()
    assert (got["events"][-1]["detail"] or {}) == {"reason": "replaced",
                                                   "by_run": newest.json()["id"]}


def test_delete_cancels_the_task_s_queued_runs(api: ApiWorld) -> None:
    """Dispatch never claims a removed task's run, so a run left queued would stay queued
    forever (and count as active): delete ends them ``cancelled`` with an event."""
    api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    run = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator")).json()
    assert api.client.delete("/v1/tasks/backup", headers=api.as_("admin")).status_code == 204
    got = api.client.get(f"/v1/runs/{run['id']}", headers=api.as_("viewer")).json()
    assert got["status"] == "cancelled" and got["finished_at"] is not None
    assert [(e["kind"], e["to_status"], (e["detail"] or {}).get("reason"))
            for e in got["events"]][-1] == ("cancelled", "cancelled", "task_deleted")


@pytest.mark.parametrize("how", ["route", "patch"])
def test_enable_records_the_slots_missed_while_disabled_in_the_ledger(api: ApiWorld,
                                                                      how: str) -> None:
    """Every slot of a task has an outcome (issue 11 item 2): the slots that passed while
    it was disabled are one ``skipped_disabled`` row once it is enabled again. The task
    stays disabled for ten minutes by the database clock: its disable event is moved back
    (no wall-clock wait, no race with a short window)."""
    api.client.post("/v1/tasks", json=task(schedule="* * * * * *"), headers=api.as_("admin"))
    if how == "route":
        api.client.post("/v1/tasks/backup/disable", headers=api.as_("operator"))
    else:
        api.client.patch("/v1/tasks/backup", json={"enabled": False},
                         headers=api.as_("admin"))
    moved = api.sql("UPDATE task_events SET at = at - interval '10 minutes'"
                    " WHERE kind IN ('disabled', 'edited') AND task_id ="
                    " (SELECT id FROM tasks WHERE name = 'backup') RETURNING kind")
    assert moved == [("disabled" if how == "route" else "edited",)]
    if how == "route":
        on = api.client.post("/v1/tasks/backup/enable", headers=api.as_("operator"))
    else:
        on = api.client.patch("/v1/tasks/backup", json={"enabled": True},
                              headers=api.as_("admin"))
    assert on.status_code == 200 and on.json()["next_fire_at"] is not None
    ledger = api.client.get("/v1/tasks/backup/occurrences", headers=api.as_("viewer")).json()
    assert [(o["outcome"], o["slot_count"] >= 2) for o in ledger["items"]] == [
        ("skipped_disabled", True)]


@pytest.mark.parametrize(("over", "message"), [
    ({"schedule": "99 * * * * MARK"}, "body.schedule: second field is invalid (5 fields, "
     "or 6 with seconds first, or an @ alias such as @daily)"),  # the field, as locally
    ({"timezone": "Mars/MARK"}, "body.timezone: not an IANA time zone name (e.g. "
     "Asia/Shanghai)"),
    ({"timeout_s": "5"}, "body.timeout_s: not an integer"),
    ({"max_attempts": 101}, "body.max_attempts: greater than the maximum 100"),
    ({"enabled": 1}, "body.enabled: not a boolean"),
    ({"concurrency_policy": "MARK"},
     "body.concurrency_policy: not one of 'forbid', 'allow' or 'replace'"),
    ({"env": {"1MARK": {"value": "x"}}},
     "body.env.* (key): use 1-128 ASCII letters, digits or '_', not starting with a digit"),
    ({"name": "备份/MARK"}, f"body.name: {NAME_RULE}"),  # 备份MARK itself is a name
    ({"env": {"MARK": {"value": "x", "MARKED": True}}},
     "body.env.*: unknown field (accepted: secret, value)"),
    ({"timout_s": 5, "MARK": 1}, "body: unknown field (accepted: argv, bundle_digest, "
     "caller_timezone, catchup_grace_s, concurrency_policy, cwd, enabled, entry_point, env, "
     "labels, "
     "log_limit_bytes, log_retention_s, max_attempts, name, retry_backoff_cap_ms, "
     "retry_backoff_ms, schedule, shell, timeout_s, timezone)"),
], ids=["cron", "zone", "number-as-string", "range", "bool-as-int", "policy", "env-name",
        "task-name", "env-entry-unknown", "unknown-field"])
def test_a_422_names_each_field_with_its_reason_and_never_the_input(
        api: ApiWorld, over: dict[str, Any], message: str) -> None:
    """Each error: the field's location (client-chosen keys as ``*``) and a reason from a
    fixed vocabulary or our own fixed phrase; an unknown field is not named (it is the
    client's key) but the accepted names are listed. Strict types: ``"5"`` for an integer
    is refused. Nothing the client sent (``MARK``, the misspelt key) appears."""
    answer = api.client.post("/v1/tasks", json=task(**over), headers=api.as_("admin"))
    assert answer.status_code == 422, answer.text
    assert answer.json() == {"error": {"code": "invalid_request",
                                       "message": f"invalid fields: {message}"}}
    assert "MARK" not in answer.text and "timout" not in answer.text
    assert api.sql("SELECT count(*) FROM tasks") == [(0,)]


def test_an_edit_refuses_a_number_given_as_a_string_and_says_why_for_null(
        api: ApiWorld) -> None:
    api.client.post("/v1/tasks", json=task(), headers=api.as_("admin"))
    for body, message in (({"timeout_s": "5"}, "body.timeout_s: not an integer"),
                          ({"max_attempts": None}, "body.max_attempts: may not be null")):
        answer = api.client.patch("/v1/tasks/backup", json=body, headers=api.as_("admin"))
        assert (answer.status_code, answer.json()["error"]["message"]) == (
            422, f"invalid fields: {message}")


def test_run_now_with_the_same_idempotency_key_answers_the_first_run(api: ApiWorld) -> None:
    """docs/protocols.md §4.5: a retry with the key answers the first run (and says so),
    another key makes a new run; only the first request records a run_requested event."""
    api.client.post("/v1/tasks", json=task("备份", concurrency_policy="allow"),
                    headers=api.as_("admin"))
    key = {"Idempotency-Key": "6f1c2a9e-0d1b-4c57-9b7e-3f7f3c1d2e4a"}
    first = api.client.post("/v1/tasks/备份/run", headers=api.as_("operator") | key)
    again = api.client.post("/v1/tasks/备份/run", headers=api.as_("operator") | key)
    other = api.client.post("/v1/tasks/备份/run",
                            headers=api.as_("operator") | {"Idempotency-Key": "k-2"})
    bare = api.client.post("/v1/tasks/备份/run", headers=api.as_("operator"))
    assert [r.status_code for r in (first, again, other, bare)] == [201] * 4, again.text
    assert again.json() == first.json() and first.json()["number"] == 1
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert (other.json()["number"], bare.json()["number"]) == (2, 3)
    assert api.sql("SELECT count(*) FROM runs")[0][0] == 3
    assert api.sql("SELECT count(*) FROM task_events WHERE kind = 'run_requested'")[0][0] == 3


def test_run_now_with_one_key_from_8_clients_at_once_makes_one_run(api: ApiWorld) -> None:
    import threading

    api.client.post("/v1/tasks", json=task(concurrency_policy="allow"),
                    headers=api.as_("admin"))
    headers = api.as_("operator") | {"Idempotency-Key": "same-key"}
    barrier = threading.Barrier(8)
    answers: list[Any] = []

    def post() -> None:
        with httpx.Client(base_url=str(api.client.base_url), timeout=30) as http:
            barrier.wait()
            answers.append(http.post("/v1/tasks/backup/run", headers=headers))

    threads = [threading.Thread(target=post) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [a.status_code for a in answers] == [201] * 8
    assert len({a.json()["id"] for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 7
    assert api.sql("SELECT count(*) FROM runs")[0][0] == 1


def test_a_key_past_24_hours_makes_a_new_run_and_a_malformed_key_is_422(
        api: ApiWorld) -> None:
    api.client.post("/v1/tasks", json=task(concurrency_policy="allow"),
                    headers=api.as_("admin"))
    key = {"Idempotency-Key": "nightly-1"}
    first = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator") | key).json()
    api.sql("UPDATE run_request_keys SET created_at = now() - interval '25 hours'")
    later = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator") | key)
    assert later.status_code == 201 and later.json()["number"] == first["number"] + 1
    assert "Idempotent-Replayed" not in later.headers
    for bad in ("x" * 256, "has space", "键"):
        refused = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator") | {
            "Idempotency-Key": bad.encode()})  # type: ignore[dict-item]
        assert refused.status_code == 422, bad
        assert refused.json()["error"]["code"] == "invalid_request"
        assert bad not in refused.text
    assert api.sql("SELECT count(*) FROM runs")[0][0] == 2


def test_a_refused_run_now_leaves_its_key_free_for_a_later_retry(api: ApiWorld) -> None:
    api.client.post("/v1/tasks", json=task(concurrency_policy="forbid"),
                    headers=api.as_("admin"))
    blocker = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator")).json()
    key = {"Idempotency-Key": "retry-me"}
    refused = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator") | key)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_refused"
    api.sql("UPDATE runs SET status = 'cancelled', finished_at = now() WHERE id = %(id)s",
            {"id": blocker["id"]})
    made = api.client.post("/v1/tasks/backup/run", headers=api.as_("operator") | key)
    assert made.status_code == 201 and made.json()["number"] == 2
    assert "Idempotent-Replayed" not in made.headers
