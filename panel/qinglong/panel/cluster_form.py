"""The cluster's task form (docs/panel.md "Cluster"): what the browser sends, turned into the
JSON of ``POST /v1/tasks`` / ``PATCH /v1/tasks/{name}`` and back, and the API's refusals
(``BackendRefusedError.problems``) worded in the user's language beside their fields.

The panel checks only the form's own shape (``NAME=value`` and ``key=value`` lines, whole
numbers, a command or an entry point); every rule about the task is the API's. Secret env
values are write-only: a stored secret shows as "set" and is kept (``{"value": null}`` in
the patch) unless a new value replaces it or it is ticked for removal.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: the API's field (first part of a problem's path) -> the form field it is shown beside
FIELD_OF = {"name": "name", "schedule": "schedule", "timezone": "timezone",
            "argv": "command", "shell": "command", "cwd": "command", "env": "env",
            "timeout_s": "timeout", "max_attempts": "attempts",
            "retry_backoff_ms": "backoff", "retry_backoff_cap_ms": "backoff_cap",
            "concurrency_policy": "concurrency", "labels": "labels",
            "bundle_digest": "entry", "entry_point": "entry"}
MS_FIELDS = frozenset({"retry_backoff_ms", "retry_backoff_cap_ms"})
LIMITS = ("ge", "le", "gt", "lt")


@dataclass
class ClusterTaskForm:
    """The form's fields as text (shown back after a refusal, nothing typed lost).

    ``entry``: ``""`` (run the command) or ``DIGEST|PATH`` (a bundle's entry point);
    ``backoff``/``backoff_cap``: seconds; ``labels``: ``key=value`` separated by commas;
    ``env``: plain ``NAME=value`` lines; ``secret_names``: the stored secrets (names only);
    ``secret_replace``: new values typed for some of them; ``secret_unset``: those ticked
    for removal; ``secret_new``: new secrets as ``NAME=value`` lines (never shown again)."""

    name: str = ""
    schedule: str = "0 8 * * *"
    timezone: str = "Asia/Shanghai"
    command: str = ""
    entry: str = ""
    timeout: str = ""
    attempts: str = "1"
    backoff: str = "10"
    backoff_cap: str = "600"
    concurrency: str = "forbid"
    labels: str = ""
    env: str = ""
    secret_names: list[str] = field(default_factory=list)
    secret_replace: dict[str, str] = field(default_factory=dict)
    secret_unset: list[str] = field(default_factory=list)
    secret_new: str = ""
    #: the stored argv when the task has one (kept while the command text is unchanged)
    argv: list[str] | None = None
    #: the task's ``version`` when the edit form was opened ("" for a new task): sent with
    #: the patch, so a task changed since is refused (409 ``task_changed``), not overwritten
    version: str = ""

    @classmethod
    def from_request(cls, form: Any) -> ClusterTaskForm:
        """The fields of a posted form (a Starlette FormData; missing ones empty)."""
        def text(key: str) -> str:
            value = form.get(key, "")
            return value if isinstance(value, str) else ""
        names = [v for v in form.getlist("secret_name") if isinstance(v, str)][:256]
        replace = {n: text(f"secret_value.{n}") for n in names if text(f"secret_value.{n}")}
        unset = [v for v in form.getlist("secret_unset") if isinstance(v, str)]
        return cls(name=text("name").strip(), schedule=text("schedule").strip(),
                   timezone=text("timezone").strip(), command=text("command").strip(),
                   entry=text("entry"), timeout=text("timeout").strip(),
                   attempts=text("attempts").strip(), backoff=text("backoff").strip(),
                   backoff_cap=text("backoff_cap").strip(),
                   concurrency=text("concurrency"), labels=text("labels"), env=text("env"),
                   secret_names=names, secret_replace=replace, secret_unset=unset,
                   secret_new=text("secret_new"), version=text("version").strip()[:20])

    @classmethod
    def from_task(cls, task: Mapping[str, Any]) -> ClusterTaskForm:
        """A stored task (``GET /v1/tasks/{name}``'s JSON) as form text; secrets by name."""
        env = dict(task.get("env") or {})
        argv = task.get("argv")
        command = str(task.get("shell") or "") or (shlex.join(argv) if argv else "")
        timeout = task.get("timeout_s")
        entry = (f"{task['bundle_digest']}|{task['entry_point']}"
                 if task.get("bundle_digest") else "")
        return cls(
            name=str(task["name"]), schedule=str(task.get("schedule") or ""),
            timezone=str(task["timezone"]), command=command, entry=entry,
            timeout="" if timeout is None else str(timeout),
            attempts=str(task["max_attempts"]),
            backoff=_seconds(task["retry_backoff_ms"]),
            backoff_cap=_seconds(task["retry_backoff_cap_ms"]),
            concurrency=str(task["concurrency_policy"]),
            labels=", ".join(f"{k}={v}" for k, v in dict(task.get("labels") or {}).items()),
            env="\n".join(f"{k}={e['value']}" for k, e in env.items() if not e["secret"]),
            secret_names=sorted(k for k, e in env.items() if e["secret"]),
            argv=list(argv) if argv else None, version=str(task.get("version", "")))

    def copied(self) -> ClusterTaskForm:
        """This form as a copy's start: no name, no secrets (their values never leave)."""
        return ClusterTaskForm(**{**self.__dict__, "name": "", "secret_names": [],
                                  "secret_replace": {}, "secret_unset": [], "argv": None,
                                  "version": ""})

    def forget_secrets(self) -> None:
        """Drop every typed secret value (write-only: never sent back to the browser)."""
        self.secret_replace = {}
        self.secret_new = ""


def body(form: ClusterTaskForm, *, editing: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The API's JSON for ``form`` (``POST /v1/tasks``, or the ``PATCH`` of every field when
    ``editing``: the name too, a new one renaming the task, and the ``version`` the form
    was opened at when it has one) and the form-shape errors (form field -> catalog key).
    Good to send only when the errors are empty."""
    errors: dict[str, str] = {}
    digest, _, entry_point = form.entry.partition("|")
    if not form.command and not digest:
        errors["command"] = "form.need_command"
    env: dict[str, Any] = {n: {"value": v, "secret": False}
                           for n, v in _pairs(form.env.splitlines(), "env", errors).items()}
    for name in form.secret_names:  # stored secrets: kept, replaced or removed
        if name in form.secret_unset:
            continue
        env[name] = {"value": form.secret_replace.get(name), "secret": True}
    for name, value in _pairs(form.secret_new.splitlines(), "secrets", errors).items():
        env[name] = {"value": value, "secret": True}
    labels = _pairs(form.labels.replace("，", ",").split(","), "labels", errors)
    out: dict[str, Any] = {
        "schedule": form.schedule or None, "timezone": form.timezone or None,
        "env": env, "labels": {k.strip(): v.strip() for k, v in labels.items()},
        "timeout_s": _whole(form.timeout, "timeout", errors, empty=None),
        "max_attempts": _whole(form.attempts, "attempts", errors, empty=1),
        "retry_backoff_ms": _ms(form.backoff, "backoff", errors),
        "retry_backoff_cap_ms": _ms(form.backoff_cap, "backoff_cap", errors),
        "concurrency_policy": form.concurrency,
        "bundle_digest": digest or None, "entry_point": entry_point if digest else None,
    }
    if form.argv is not None and form.command == shlex.join(form.argv):
        pass  # the stored argv stays (an edit of other fields)
    else:
        out["shell"] = form.command or None
        if editing:
            out["argv"] = None
    out["name"] = form.name
    if editing and form.version.isdigit():  # a stale edit is refused (task_changed)
        out["version"] = int(form.version)
    for key in ("retry_backoff_ms", "retry_backoff_cap_ms"):
        if out[key] is None:
            del out[key]
    return out, errors


def _pairs(lines: list[str], key: str, errors: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            errors[key] = "cform.bad_pair"
            continue
        out[name.strip()] = value
    return out


def _whole(text: str, key: str, errors: dict[str, str], empty: int | None) -> int | None:
    if not text:
        return empty
    try:
        return int(text)
    except ValueError:
        errors[key] = "cform.whole_number"
        return empty


def _ms(text: str, key: str, errors: dict[str, str]) -> int | None:
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        errors[key] = "form.bad_number"
        return None
    if not math.isfinite(seconds) or abs(seconds) > 1e10:  # the API's range says the rest
        errors[key] = "form.bad_number"
        return None
    return round(seconds * 1000)


def _seconds(ms: Any) -> str:
    """Milliseconds as seconds text: ``1500`` -> ``1.5``, never in exponent notation."""
    return f"{int(ms) / 1000:.3f}".rstrip("0").rstrip(".")


def field_of(path: str, secret_names: set[str]) -> str:
    """The form field a problem's API path (``env.NAME.value``) is shown beside: an env
    entry that is a secret beside the secrets; ``""`` for none of the form's."""
    parts = path.split(".")
    if parts[0] == "env" and len(parts) > 1 and parts[1] in secret_names:
        return "secrets"
    return FIELD_OF.get(parts[0], "")


def worded(problem: Mapping[str, Any], t: Mapping[str, str]) -> str:
    """One problem in the catalog ``t``'s language: ``cform.err.CODE`` with its params (a
    schedule's ``part`` named by ``cform.part.*``; limits of the millisecond backoffs in
    seconds); ``cform.err.invalid`` for a code the catalog lacks."""
    code = str(problem.get("code", "invalid"))
    params = {k: str(v) for k, v in dict(problem.get("params") or {}).items()}
    if str(problem.get("field", "")).split(".")[0] in MS_FIELDS:
        for key in LIMITS:
            if key in params and params[key].lstrip("-").isdigit():
                params[key] = _seconds(params[key])
    if "part" in params:  # a schedule's field, named in the catalog's language
        params["part"] = t.get(f"cform.part.{params['part']}", params["part"])
    for extra in ("part", "guess"):  # the words that name it, where the catalog has them
        if extra in params and f"cform.err.{code}_{extra}" in t:
            code = f"{code}_{extra}"
    template = t.get(f"cform.err.{code}") or t["cform.err.invalid"]
    try:
        return template.format(**params)
    except (KeyError, IndexError, ValueError):
        return t["cform.err.invalid"]


def worded_problems(problems: list[dict[str, Any]], form: ClusterTaskForm,
                    t: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """(form field -> text, a text for problems no field holds) for the API's refusal."""
    secrets = set(form.secret_names) | set(_pairs(form.secret_new.splitlines(), "x", {}))
    fields: dict[str, str] = {}
    general = []
    for problem in problems:
        text = worded(problem, t)
        where = field_of(str(problem.get("field", "")), secrets)
        if where and where not in fields:
            fields[where] = text
        elif not where:
            general.append(text)
    return fields, "; ".join(general) or None
