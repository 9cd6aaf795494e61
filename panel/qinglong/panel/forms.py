"""The task form of the panel (docs/panel.md "Task form"): what the browser sends, turned into
the local socket's ``task_add`` spec or ``task_edit`` changes, and back.

The panel checks only the form's own shape (a command that splits like a shell line,
``NAME=value`` lines, whole numbers); every rule about the task itself (name, schedule, zone,
limits) is the owner's, and its refusal is shown beside the field it names.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from qinglong.shared.script_paths import shell_operator

CONCURRENCY = ("forbid", "allow", "replace")
#: the longest command text the form splits: the launcher's whole argv-and-environment
#: budget (local/process/launch_request.py LAUNCH_MAX_BYTES), nothing longer can start;
#: shlex takes seconds on a text this long, minutes on megabytes
COMMAND_MAX_BYTES = 256 * 1024

#: the owner's ValidationError field -> the form field it is shown beside
FIELD_OF = {"name": "name", "schedule": "schedule", "timezone": "timezone", "argv": "command",
            "cwd": "command", "env": "env", "env_unset": "env", "secret_env": "secret_env",
            "timeout": "timeout", "max_attempts": "attempts", "concurrency": "concurrency",
            "labels": "labels"}


@dataclass
class TaskForm:
    """The form's fields as text (what the page shows back after a refusal).

    ``secret_names``: the task's secret variables (names only: values are write-only);
    ``secret_unset``: those the user ticked for removal; ``secret_env``: new secrets as
    ``NAME=value`` or ``NAME=@VAR`` lines, never shown again."""

    name: str = ""
    schedule: str = "0 8 * * *"
    timezone: str = "Asia/Shanghai"
    command: str = ""
    timeout: str = ""
    attempts: str = "1"
    concurrency: str = "forbid"
    env: str = ""
    labels: str = ""
    secret_env: str = ""
    secret_names: list[str] = field(default_factory=list)
    secret_unset: list[str] = field(default_factory=list)
    #: the task's ``version`` when the form was opened ("" for a new task): the owner
    #: refuses the edit when the task changed since ("changed meanwhile")
    version: str = ""

    @classmethod
    def from_request(cls, form: Mapping[str, Any], unset: list[str]) -> TaskForm:
        """The fields of a posted form (missing ones empty; ``unset``: the ticked secret
        names)."""
        def text(key: str) -> str:
            value = form.get(key, "")
            return value if isinstance(value, str) else ""
        return cls(name=text("name").strip(), schedule=text("schedule").strip(),
                   timezone=text("timezone").strip(), command=text("command").strip(),
                   timeout=text("timeout").strip(), attempts=text("attempts").strip(),
                   concurrency=text("concurrency"), env=text("env"), labels=text("labels"),
                   secret_env=text("secret_env"), secret_unset=unset,
                   version=text("version").strip()[:20])

    @classmethod
    def from_task(cls, task: Mapping[str, Any]) -> TaskForm:
        """A stored task (the ``task_show`` shape) as form text; secrets by name only."""
        timeout = task.get("timeout_s")
        return cls(
            name=str(task["name"]), schedule=str(task["schedule"]),
            timezone=str(task["timezone"]), command=shlex.join(task["argv"]),
            timeout="" if timeout is None else f"{float(timeout):g}",
            attempts=str(task["max_attempts"]), concurrency=str(task["concurrency"]),
            env="\n".join(f"{k}={v}" for k, v in dict(task.get("env") or {}).items()),
            labels=", ".join(task.get("labels") or ()),
            secret_names=sorted(dict(task.get("secret_env") or {})),
            version=str(task.get("version", "")))


def parse(form: TaskForm) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``task_add`` spec of ``form`` and the form-shape errors (field -> catalog key).
    The spec is only good to send when the errors are empty."""
    errors: dict[str, str] = {}
    argv: list[str] = []
    if len(form.command.encode("utf-8", "surrogatepass")) > COMMAND_MAX_BYTES:
        errors["command"] = "form.err.launch_budget"
    else:
        try:
            argv = shlex.split(form.command)
        except ValueError:
            errors["command"] = "form.bad_command"
    if not argv and "command" not in errors:
        errors["command"] = "form.need_command"
    elif shell_operator(argv) is not None:  # as `ql3 local task add` (shared/script_paths)
        errors["command"] = "forms.err.shell_operator"
    env = _lines(form.env, "env", errors)
    secrets: dict[str, dict[str, str]] = {}
    for name, value in _lines(form.secret_env, "secret_env", errors).items():
        secrets[name] = ({"variable": value[1:]} if value.startswith("@") and len(value) > 1
                         else {"value": value})
    timeout: float | None = None
    if form.timeout:
        try:
            timeout = float(form.timeout)
        except ValueError:
            errors["timeout"] = "form.bad_number"
    attempts = 1
    try:
        attempts = int(form.attempts or "1")
    except ValueError:
        errors["attempts"] = "form.bad_number"
    labels = [p.strip() for p in form.labels.replace("，", ",").split(",") if p.strip()]
    spec = {"name": form.name, "argv": argv, "schedule": form.schedule,
            "timezone": form.timezone, "env": env, "timeout_s": timeout,
            "max_attempts": attempts, "concurrency": form.concurrency, "labels": labels,
            "secret_env": secrets}
    return spec, errors


def edit_changes(spec: dict[str, Any], old: Mapping[str, Any],
                 secret_unset: list[str], version: str = "") -> dict[str, Any]:
    """``task_edit`` changes turning the stored task ``old`` into ``spec`` (a new name and
    the whole label list included; the owner records only what differs)."""
    old_env = dict(old.get("env") or {})
    changes: dict[str, Any] = {
        "name": spec["name"] or str(old["name"]), "labels": spec["labels"],
        "argv": spec["argv"], "schedule": spec["schedule"], "timezone": spec["timezone"],
        "timeout_s": spec["timeout_s"], "max_attempts": spec["max_attempts"],
        "concurrency": spec["concurrency"],
        "env_set": {k: v for k, v in spec["env"].items() if old_env.get(k) != v},
        "env_unset": [k for k in old_env if k not in spec["env"]],
    }
    if version.isdigit():  # the version the form was opened at: a stale edit is refused
        changes["if_version"] = int(version)
    # no "cwd": the owner keeps the stored one (a directory deleted since must not block an
    # unrelated edit; task_changes.apply_changes)
    if spec["secret_env"]:
        changes["secret_env"] = spec["secret_env"]
    unset = [n for n in secret_unset if n in dict(old.get("secret_env") or {})]
    if unset:
        changes["secret_env_unset"] = unset
    return changes


def _lines(text: str, key: str, errors: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            errors[key] = "form.bad_env_line"
            continue
        out[name.strip()] = value
    return out


#: catalog keys for the owner's refusals by the field they name (the rules of
#: shared/names.py, shared/cron.py and local/app/task_input.py in the viewer's language);
#: a field not here keeps the owner's own words
OWNER_KEYS = {"name": "cform.err.name_rule", "schedule": "cform.err.schedule",
              "timezone": "cform.err.timezone", "labels": "form.err.labels",
              "timeout": "form.err.timeout", "max_attempts": "form.err.attempts",
              "concurrency": "cform.err.literal_error"}
# -- owner refusals in the viewer's language (local form refusals) --
#: the owner's other refusals the form can meet, by field and a phrase of the owner's text
#: (local/app/task_input.py, local/storage/secrets.py, local/app/service.py), and their keys
OWNER_TEXTS = (
    ("argv", "must not be empty", "form.need_command"),
    ("schedule", "never matches a real date", "forms.err.schedule_never"),
    ("argv", "name must not be blank", "form.err.command_blank"),
    ("argv", "without NUL", "cform.err.nul"), ("env", "without NUL", "cform.err.nul"),
    ("argv", "exceed", "form.err.launch_budget"),
    ("env", "names must match", "form.err.env_name"),
    ("secret_env", "names must match", "form.err.env_name"),
    ("env", "are reserved", "form.err.env_reserved"),
    ("secret_env", "are reserved", "form.err.env_reserved"),
    ("env", "is a secret variable of this task", "form.err.env_is_secret"),
    ("secret_env", "is also a plain", "form.err.secret_also_plain"),
    ("secret_env", "contains a NUL", "cform.err.nul"),
    ("secret_env", "VAR must match", "form.err.secret_ref"),
    ("secret_env", "no global variable", "form.err.secret_missing_var"),
    ("labels", "is key=value", "form.err.label_pair"),
)
#: refusals naming no field of the form: a phrase of the owner's text -> the banner's key
OWNER_GENERAL = (("changed meanwhile", "form.err.changed_meanwhile"),
                 ("request: larger than", "forms.err.too_large"),
                 ("keeps its runs under that name", "form.err.name_history"))
_SCHEDULE_PART = re.compile(r"(second|minute|hour|day-of-month|month|day-of-week) field\b")
DUPLICATE_NAME = "a task with that name already exists"


def owner_field(message: str) -> tuple[str, str]:
    """The form field an owner's refusal names (``"field: text"``) and what to show: a
    catalog key (``cform.err.*``/``form.err.*``, the template translates it) for the rules
    of :data:`OWNER_KEYS`, a cron field's own key (``form.err.schedule.minute``) when the
    schedule names one, ``form.err.duplicate_name`` (no field: the page's banner) for a
    name taken, the key of :data:`OWNER_TEXTS`/:data:`OWNER_GENERAL` for the other
    refusals the form can meet, else the owner's text. The field is ``""`` when it names none of the
    form's."""
    head, sep, rest = message.partition(": ")
    if message.startswith(DUPLICATE_NAME):
        return "", "form.err.duplicate_name"
    if sep and head in FIELD_OF:
        if head == "schedule" and (part := _SCHEDULE_PART.match(rest)):
            return "schedule", "form.err.schedule." + part.group(1).replace("-", "_")
        key = next((k for f, phrase, k in OWNER_TEXTS if f == head and phrase in rest), None)
        return FIELD_OF[head], key or OWNER_KEYS.get(head, rest)
    return "", next((k for phrase, k in OWNER_GENERAL if phrase in message), message)


@cache
def zones() -> tuple[str, ...]:
    """The IANA zones this machine knows, sorted (the zone picker's list)."""
    return tuple(sorted(available_timezones()))


def local_times(slots: list[str], zone: str) -> list[str]:
    """ISO UTC instants as ``YYYY-MM-DD HH:MM:SS`` wall-clock times in ``zone`` (UTC when
    the panel's machine does not know the zone)."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
    out = []
    for slot in slots:
        at = datetime.fromisoformat(slot.replace("Z", "+00:00")).astimezone(tz)
        out.append(at.strftime("%Y-%m-%d %H:%M:%S"))
    return out
