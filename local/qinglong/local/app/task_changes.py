"""``ql3 local task edit`` and ``task next`` (issue 12 items 1 and 2): merging requested
changes into a task, validated as ``task add`` validates, and listing upcoming slots."""

from __future__ import annotations

import dataclasses
from typing import Any

from qinglong.local.app.task_input import TaskInput
from qinglong.shared.cron import parse_schedule
from qinglong.shared.domain import Task
from qinglong.shared.errors import ValidationError

EDITABLE = ("name", "argv", "schedule", "timezone", "env", "cwd", "timeout_s",
            "max_attempts", "concurrency", "labels")
"""The fields an edit may change, in the order an event names them."""
_SHOWN = ("name", "schedule", "timezone", "cwd", "timeout_s", "max_attempts", "concurrency",
          "labels")
"""Fields whose old and new values the ``task_edited`` event carries (never env or argv:
either may hold a secret)."""
SECRET_KEYS = ("secret_env", "secret_env_unset")
"""Changes to the task's secret variables (``{name: {"value"} | {"variable"}}`` and names):
applied by the store in the edit's transaction, named (never valued) in its event."""
MAX_NEXT = 100


def apply_changes(task: Task, changes: dict[str, Any]) -> tuple[Task, dict[str, object]]:
    """The task with ``changes`` applied, and the ``task_edited`` event detail.

    ``changes`` holds any of ``argv`` (list), ``schedule``, ``timezone``, ``cwd`` (None:
    the default directory), ``timeout_s`` (None: no timeout), ``max_attempts``,
    ``concurrency``, ``env_set`` (name -> value), ``env_unset`` (names), ``name`` (a new
    name, ``shared/names.py``'s rule), ``labels`` (the whole new list) or ``labels_add`` /
    ``labels_unset`` (labels added at the end / removed); a key absent means unchanged.
    The detail is ``{"changed": [field...], <field>: {"from", "to"}..., "env_set":
    [name...], "env_unset": [name...]}`` with values only for the fields in
    ``_SHOWN``: environment values and the command are never copied into an event.

    Raises:
        ValidationError: a field the way ``task add`` names it, ``env_unset`` for a name the
            task does not have (``labels_unset``: a label), or ``edit`` when nothing is
            asked for.
    """
    if (set(changes) - {*EDITABLE, *SECRET_KEYS, "env_set", "env_unset", "labels_add",
                        "labels_unset"} or "env" in changes):
        raise ValidationError("edit", "unknown field")
    if not changes:
        raise ValidationError("edit", "nothing to change: give at least one option")
    changes = {k: v for k, v in changes.items() if k not in SECRET_KEYS}  # the store's part
    env = dict(task.env)
    env_set = {str(k): v for k, v in dict(changes.get("env_set") or {}).items()}
    env_unset = [str(n) for n in changes.get("env_unset") or ()]
    for name in env_unset:
        if name not in env and name not in env_set:
            raise ValidationError("env_unset", f"the task has no variable {name}")
        env.pop(name, None)
    env.update(env_set)
    labels = list(changes.get("labels", task.labels))
    for label in changes.get("labels_unset") or ():
        if label not in labels:
            raise ValidationError("labels_unset", f"the task has no label {label}")
        labels.remove(label)
    labels += list(changes.get("labels_add") or ())
    relabel = labels != list(task.labels)
    merged = TaskInput(
        name=changes.get("name", task.name),
        argv=tuple(changes.get("argv", task.argv)),
        schedule=changes.get("schedule", task.schedule),
        timezone=changes.get("timezone", task.timezone),
        env=env,
        # a cwd deleted since the task was added must not block an unrelated edit: the
        # stored one is checked at launch (and named in the error and the log)
        cwd=changes.get("cwd"),
        timeout_s=changes.get("timeout_s", task.timeout_s),
        max_attempts=int(changes.get("max_attempts", task.max_attempts)),
        concurrency=str(changes.get("concurrency", task.concurrency.value)),
        # unchanged labels are not checked again: a later rule never blocks an edit
        labels=tuple(labels) if relabel else (),
        misfire_grace_s=task.misfire_grace_s,
    )
    validated = merged.to_task()
    if "cwd" not in changes:
        validated = dataclasses.replace(validated, cwd=task.cwd)
    new = dataclasses.replace(task, name=validated.name,
                              labels=validated.labels if relabel else task.labels,
                              argv=validated.argv, schedule=validated.schedule,
                              timezone=validated.timezone, env=validated.env,
                              cwd=validated.cwd, timeout_s=validated.timeout_s,
                              max_attempts=validated.max_attempts,
                              concurrency=validated.concurrency)
    changed = [f for f in EDITABLE if _value(new, f) != _value(task, f)]
    detail: dict[str, object] = {"changed": changed}
    for name in _SHOWN:
        if name in changed:
            detail[name] = {"from": _value(task, name), "to": _value(new, name)}
    if "env" in changed:
        detail["env_set"] = sorted(n for n in env_set if task.env.get(n) != env_set[n])
        detail["env_unset"] = sorted(n for n in env_unset if n in task.env)
    return new, detail


def _value(task: Task, name: str) -> object:
    value = getattr(task, name)
    if name == "concurrency":
        return str(value.value)
    if name in ("argv", "labels"):
        return list(value)
    return value


def upcoming_slots(task: Task, after_ms: int, count: int) -> list[int]:
    """The next ``count`` (1-100) slots of the task's schedule after ``after_ms`` (Unix ms),
    in its time zone; empty for ``@boot``/``@once``. Raises ValidationError for a count
    outside 1-100 or a schedule that no longer parses."""
    if not 1 <= count <= MAX_NEXT:
        raise ValidationError("count", f"must be between 1 and {MAX_NEXT}")
    return parse_schedule(task.schedule, task.timezone).next_slots(after_ms, count)
