"""Task definitions in PostgreSQL for the API (docs/architecture.md §2 Task; docs/protocols.md §4.2,
§4.5).

Every function runs inside the caller's transaction (``engine.begin()``) on a SQLAlchemy
connection acting as the runtime role. Rules held here:

- a live task's name is unique per project (``tasks_live_name_idx``): a duplicate is
  ``ApiError(409, "task_exists")``; delete is soft (``deleted_at``), frees the name and
  keeps runs, events and the ledger readable;
- every change writes one ``task_events`` row naming the changed fields and the acting
  token's name — never a value, so a secret never reaches history;
- a change of schedule, time zone or enabled recomputes ``next_fire_at`` in the same
  transaction (the first slot strictly after the database's ``now()`` in the task's zone,
  from ``qinglong.shared.cron``) and bumps ``schedule_version``, the scheduler's
  compare-and-set fence (§4.2); disable and delete set it NULL.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, null, or_, select, text, update
from sqlalchemy.exc import IntegrityError

from qinglong.control.api.errors import ApiError
from qinglong.control.db.tables import runs, task_events, tasks
from qinglong.shared.bundles import BundleError, normalize_entry_point
from qinglong.shared.cron import parse_schedule
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7
from qinglong.shared.names import NAME_RULE, check_task_labels, name_key

if TYPE_CHECKING:
    from sqlalchemy import Connection, RowMapping

SCHEDULE_FIELDS = frozenset({"schedule", "timezone", "enabled"})


def _sql_nulls(values: dict[str, Any]) -> dict[str, Any]:
    """JSON columns take SQL NULL, not the JSON ``null`` SQLAlchemy writes for None."""
    return {k: null() if v is None and k in ("argv", "sealed_env") else v
            for k, v in values.items()}


# The reason shown for a definition the shared modules refuse, by field: a fixed phrase of
# ours (their own messages quote the input, e.g. an unknown zone's name, so never shown).
DEFINITION_REASONS = {
    "schedule": "not a valid cron expression (5 fields, or 6 with seconds first, or an "
                "@ alias such as @daily)",
    "timezone": "not an IANA time zone name (e.g. Asia/Shanghai)",
    "labels": "keys: 1-63 ASCII letters, digits, '_', '.' or '-', starting with a letter "
              "or digit; values: " + NAME_RULE.removeprefix("use ") + "; at most 32 pairs",
}


def _definition_reason(exc: ValidationError, values: dict[str, Any]
                       ) -> tuple[str | None, dict[str, str]]:
    """The reason for a refused schedule or zone, as ``ql3 local`` words it but without the
    input: a schedule's names its field (``minute field is invalid (5 fields, …)``), a
    zone's adds the zone it most likely meant (``did you mean Asia/Shanghai?``); and the
    same as params for ``ApiError.problem`` (``part``, ``guess``)."""
    if exc.field == "schedule":  # the field by name, never the text given for it
        field = re.match(r"schedule: (second|minute|hour|day-of-month|month|day-of-week|"
                         r"day of month|day of week)\b", str(exc))
        if field is not None:
            part = field.group(1).replace(" ", "-")
            return (f"{field.group(1)} field is invalid (" +
                    DEFINITION_REASONS["schedule"].split(" (", 1)[1], {"part": part})
        return None, {}
    if exc.field == "timezone":
        from qinglong.shared.zones import suggest_zone

        guess = suggest_zone(str(values.get("timezone") or ""))
        base = DEFINITION_REASONS["timezone"]
        return (f"{base}; did you mean {guess}?" if guess else base,
                {"guess": guess} if guess else {})
    return None, {}


def invalid(field: str, reason: str | None = None, *, code: str = "invalid",
            **params: str) -> ApiError:
    """The 422 for one body field: its name and a fixed ``reason`` (default: this field's
    ``DEFINITION_REASONS`` entry, else "invalid value"), never its value. ``code`` and
    ``params`` become ``ApiError.problem`` (the panel words them in its own languages)."""
    why = reason or DEFINITION_REASONS.get(field, "invalid value")
    error = ApiError(422, "invalid_request", f"invalid fields: body.{field}: {why}")
    error.problem = (field, code, dict(params))
    return error


def check_definition(values: dict[str, Any]) -> None:
    """Validate the cross-field rules of a whole definition: exactly one of argv/shell (at
    most one for a bundle task, which has no cwd; ``bundle_digest`` and ``entry_point``
    together, the entry point normalized in ``values``), the schedule and time zone (shared
    cron module), the labels. Raises ApiError 422."""
    if (values.get("bundle_digest") is None) != (values.get("entry_point") is None):
        raise ApiError(422, "invalid_request", "give bundle_digest and entry_point together")
    if values.get("bundle_digest") is None:
        if (values.get("argv") is None) == (values.get("shell") is None):
            raise ApiError(422, "invalid_request", "give exactly one of argv and shell")
    else:
        if values.get("argv") is not None and values.get("shell") is not None:
            raise ApiError(422, "invalid_request", "give at most one of argv and shell")
        if values.get("cwd") is not None:
            raise invalid("cwd", "a bundle task runs in its extracted bundle: no cwd",
                          code="bundle_cwd")
        try:
            values["entry_point"] = normalize_entry_point(values["entry_point"])
        except BundleError:
            raise invalid("entry_point", "not a relative path inside the bundle",
                          code="entry_point_path") from None
    try:
        if values.get("schedule") is not None:
            if parse_schedule(values["schedule"], values["timezone"]).kind == "boot":
                # no one machine boots a cluster: accepted, it would never fire
                raise invalid("schedule", "@boot runs once per start of `ql3 local serve`; "
                              "the cluster has none: use a cron schedule, or @once and run it",
                              code="boot")
        else:
            parse_schedule("@once", values["timezone"])  # the zone alone
        if "labels" in values:
            values["labels"] = check_task_labels(values["labels"])
    except ValidationError as exc:
        why, params = _definition_reason(exc, values)
        raise invalid(exc.field, why, code=exc.field, **params) from None


def next_fire_at(conn: Connection, values: dict[str, Any]) -> datetime | None:
    """The first slot strictly after the database's now() in the task's zone, or None for a
    disabled, manual (no schedule), @once or @boot task. # docs/protocols.md §4.2"""
    if not values.get("enabled", True) or values.get("schedule") is None:
        return None
    schedule = parse_schedule(values["schedule"], values["timezone"])
    now: datetime = conn.execute(text("SELECT now()")).scalar_one()
    slot = schedule.next_slot_after(int(now.timestamp() * 1000))
    return None if slot is None else datetime.fromtimestamp(slot / 1000, UTC)


def check_bundle(conn: Connection, values: dict[str, Any]) -> None:
    """A named bundle must be recorded and its entry point a regular file of it: 422
    ``bundle_not_found`` / ``entry_point_not_found`` (docs/protocols.md §4.7)."""
    from qinglong.control.bundles.errors import EntryPointNotFoundError, UnknownBundleError
    from qinglong.control.bundles.records import require_entry_point

    if values.get("bundle_digest") is None:
        return
    try:
        require_entry_point(conn, values["bundle_digest"], values["entry_point"])
    except UnknownBundleError:
        raise ApiError(422, "bundle_not_found", "no bundle has this digest: push it "
                       "first") from None
    except EntryPointNotFoundError:
        raise ApiError(422, "entry_point_not_found",
                       "the entry point is not a regular file of the bundle") from None


def _integrity(exc: IntegrityError) -> ApiError | None:
    """The answer for a constraint a concurrent change broke, or None."""
    if "tasks_live_name_idx" in str(exc.orig) or "tasks_live_name_key_idx" in str(exc.orig):
        return ApiError(409, "task_exists", "a live task has this name")
    if "tasks_bundle_digest_fkey" in str(exc.orig):  # removed meanwhile
        return ApiError(422, "bundle_not_found", "no bundle has this digest: push it first")
    return None


def record_event(conn: Connection, task_id: str, kind: str, **detail: Any) -> None:
    """Append one ``task_events`` row (field names and token names only, never values)."""
    conn.execute(task_events.insert().values(id=uuid7(), task_id=task_id, kind=kind,
                                             detail=detail))


def live_task(conn: Connection, project_id: str, name: str, *, lock: bool = False
              ) -> RowMapping:
    """The live task ``name`` of the project, found by its key (``shared/names.py``:
    ``签到１`` finds ``签到1``); ApiError 404 ``task_not_found`` otherwise."""
    query = (select(tasks)
             .where(tasks.c.project_id == project_id, tasks.c.deleted_at.is_(None),
                    or_(tasks.c.name == name, tasks.c.name_key == name_key(name)))
             .order_by((tasks.c.name == name).desc()).limit(1))
    if lock:
        query = query.with_for_update()
    row = conn.execute(query).mappings().first()
    if row is None:
        raise ApiError(404, "task_not_found", "no live task has this name")
    return row


def _stored_env(conn: Connection, keyring: Any, task_id: str, env: dict[str, Any]
                ) -> dict[str, Any]:
    """``{"env", "sealed_env"}`` to write (secrets/store.py); 503 ``secrets_key_missing``
    when sealing is on and this replica holds no keyring."""
    from qinglong.control.secrets.store import SecretsKeyMissingError, stored_env

    try:
        return stored_env(conn, keyring, task_id, env)
    except SecretsKeyMissingError:
        raise ApiError(503, "secrets_key_missing", "secret values are sealed and this "
                       "replica has no keyring: start it with --secrets-keyring") from None


def opened_task(row: RowMapping, keyring: Any) -> dict[str, Any]:
    """``row`` as a dict whose ``env`` has its sealed secret values opened (for a merge or
    a comparison; never for an answer). 503 as ``_stored_env``."""
    from qinglong.control.secrets.store import SecretsKeyMissingError, opened_env

    try:
        env = opened_env(keyring, str(row["id"]), dict(row["env"]), row.get("sealed_env"))
    except SecretsKeyMissingError:
        raise ApiError(503, "secrets_key_missing", "secret values are sealed and this "
                       "replica has no keyring: start it with --secrets-keyring") from None
    return {**dict(row), "env": env}


def create_task(conn: Connection, project_id: str, values: dict[str, Any], by: str,
                keyring: Any = None) -> RowMapping:
    """Insert a task from validated ``values`` (TaskCreate's fields); 409 ``task_exists``
    when a live task has the name. Secret values are sealed with ``keyring`` (a
    ``secrets.sealing.Keyring``) once sealing is on (docs/operations.md)."""
    check_definition(values)
    check_bundle(conn, values)
    task_id = uuid7()
    row = dict(values, id=task_id, project_id=project_id, name_key=name_key(values["name"]),
               next_fire_at=next_fire_at(conn, values), schedule_version=1)
    row.update(_stored_env(conn, keyring, task_id, dict(values.get("env") or {})))
    try:
        with conn.begin_nested():
            conn.execute(tasks.insert().values(**_sql_nulls(row)))
    except IntegrityError as exc:
        answer = _integrity(exc)
        if answer is not None:
            raise answer from None
        raise
    record_event(conn, task_id, "created", by=by)
    return conn.execute(select(tasks).where(tasks.c.id == task_id)).mappings().one()


def _merged_env(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for name, entry in patch.items():  # nested fields the client left out are absent
        if entry.get("value") is None:
            if name not in old:
                raise invalid("env.*", "a null value keeps an existing entry only",
                              code="keep_missing")
            # keeping a value keeps its secrecy: an edit never downgrades a secret
            env[name] = {"value": old[name]["value"],
                         "secret": bool(entry.get("secret") or old[name].get("secret"))}
        else:
            env[name] = {"value": entry["value"], "secret": bool(entry.get("secret"))}
    return env


def edit_task(conn: Connection, project_id: str, name: str, patch: dict[str, Any],
              nullable: frozenset[str], by: str, keyring: Any = None) -> RowMapping:
    """Apply ``patch`` (the fields the client sent) to the live task ``name``; keeps its id
    and history, writes an ``edited`` event naming the changed fields. 422 for a null
    non-nullable field or a broken definition; 404 for an unknown name. A changed env is
    stored as ``create_task`` stores it (sealed once sealing is on).

    ``patch["version"]`` (optional, not stored): the task's ``version`` as the client read
    it; another one is 409 ``task_changed`` and nothing changes (checked under the row's
    lock, so of two edits from the same version one wins). ``patch["name"]`` renames: the
    key (``name_key``) follows, runs, numbering, history and the next fire time stay the
    row's; a name a live task has is 409 ``task_exists``. # docs/protocols.md §4.5"""
    stored = live_task(conn, project_id, name, lock=True)
    for field, value in patch.items():
        if value is None and field not in nullable:
            raise invalid(field, "may not be null", code="null")
    patch = dict(patch)
    expected = patch.pop("version", None)
    if expected is not None and expected != stored["version"]:
        raise ApiError(409, "task_changed", "the task was changed since the version given "
                       "was read: read it again and redo the change")
    old = opened_task(stored, keyring) if "env" in patch else dict(stored)
    if patch.get("argv") is not None and patch.get("shell") is not None:
        raise ApiError(422, "invalid_request", "give exactly one of argv and shell")
    if patch.get("argv") is not None:
        patch.setdefault("shell", None)
    if patch.get("shell") is not None:
        patch.setdefault("argv", None)
    if patch.get("bundle_digest") is not None:
        patch.setdefault("cwd", None)  # a bundle task runs in its extracted bundle
    if "bundle_digest" in patch and patch["bundle_digest"] is None:
        patch.setdefault("entry_point", None)
    if "env" in patch:
        patch["env"] = _merged_env(dict(old["env"]), patch["env"])
    merged = {**dict(old), **patch}
    check_definition(merged)
    if "entry_point" in patch:
        patch["entry_point"] = merged["entry_point"]  # normalized
    changed = sorted(f for f, v in patch.items() if old[f] != v)
    if not changed:
        return stored
    if {"bundle_digest", "entry_point"} & set(changed):
        check_bundle(conn, merged)
    values: dict[str, Any] = _sql_nulls({f: patch[f] for f in changed})
    if "name" in values:
        values["name_key"] = name_key(values["name"])
    if "env" in values:
        values.update(_sql_nulls(_stored_env(conn, keyring, str(old["id"]), values["env"])))
    if SCHEDULE_FIELDS & set(changed):
        values["next_fire_at"] = next_fire_at(conn, merged)
        values["schedule_version"] = tasks.c.schedule_version + 1
    try:
        with conn.begin_nested():
            conn.execute(update(tasks).where(tasks.c.id == old["id"]).values(
                **values, version=tasks.c.version + 1, updated_at=func.now()))
    except IntegrityError as exc:
        answer = _integrity(exc)
        if answer is not None:
            raise answer from None
        raise
    if "enabled" in changed and patch["enabled"] and not old["enabled"]:
        _record_disabled_gap(conn, str(old["id"]))
    record_event(conn, old["id"], "edited", fields=changed, by=by)
    return conn.execute(select(tasks).where(tasks.c.id == old["id"])).mappings().one()


def set_enabled(conn: Connection, project_id: str, name: str, enabled: bool, by: str
                ) -> RowMapping:
    """Enable (next fire time computed) or disable (next fire time NULL) the live task;
    idempotent: no change, no event."""
    old = live_task(conn, project_id, name, lock=True)
    if old["enabled"] == enabled:
        return old
    merged = {**dict(old), "enabled": enabled}
    conn.execute(update(tasks).where(tasks.c.id == old["id"]).values(
        enabled=enabled, next_fire_at=next_fire_at(conn, merged),
        schedule_version=tasks.c.schedule_version + 1, version=tasks.c.version + 1,
        updated_at=func.now()))
    if enabled:
        _record_disabled_gap(conn, str(old["id"]))
    record_event(conn, old["id"], "enabled" if enabled else "disabled", by=by)
    return conn.execute(select(tasks).where(tasks.c.id == old["id"])).mappings().one()


def _record_disabled_gap(conn: Connection, task_id: str) -> None:
    """The task was just enabled: its slots since the last disable become one
    ``skipped_disabled`` ledger row (``scheduling.next_fire.on_enable``, which also
    recomputes the next fire time). A task created disabled has no such slots."""
    from qinglong.control.scheduling.next_fire import on_enable

    since = conn.execute(select(task_events.c.at).where(
        task_events.c.task_id == task_id,
        or_(task_events.c.kind == "disabled",  # or a PATCH that disabled it
            and_(task_events.c.kind == "edited",
                 task_events.c.detail["fields"].contains(["enabled"]))))
        .order_by(task_events.c.at.desc()).limit(1)).scalar()
    if since is not None:
        on_enable(conn, task_id, disabled_since=since)


def delete_task(conn: Connection, project_id: str, name: str, by: str) -> None:
    """Soft-delete the live task: ``deleted_at`` set, next fire time NULL, name freed;
    its runs, events and ledger stay readable. Its queued runs end ``cancelled`` (reason
    ``task_deleted``); dispatching and running ones finish, and are not retried."""
    from qinglong.control.scheduling.firing import cancel_queued

    old = live_task(conn, project_id, name, lock=True)
    # dispatch never claims a removed task's run: a queued one would wait forever
    for (run_id,) in conn.execute(select(runs.c.id).where(
            runs.c.task_id == old["id"], runs.c.status == "queued")).all():
        cancel_queued(conn, str(run_id), reason="task_deleted")
    conn.execute(update(tasks).where(tasks.c.id == old["id"]).values(
        deleted_at=func.now(), next_fire_at=None,
        schedule_version=tasks.c.schedule_version + 1, version=tasks.c.version + 1,
        updated_at=func.now()))
    record_event(conn, old["id"], "deleted", by=by)


def history(conn: Connection, task_id: str, limit: int = 100) -> list[RowMapping]:
    """The task's latest ``limit`` events, newest first."""
    return list(conn.execute(
        select(task_events).where(task_events.c.task_id == task_id)
        .order_by(task_events.c.at.desc(), task_events.c.id.desc()).limit(limit)
    ).mappings())
