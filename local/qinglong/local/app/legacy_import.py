"""Import crons and environment variables from a Qinglong 2.x ``database.sqlite``.

docs/protocols.md §3.8 (issue 3 item 7). Qinglong 2.11 and later keep their state in one SQLite
file, ``data/db/database.sqlite``, written by Sequelize: table ``Crontabs`` (one row per cron) and
table ``Envs`` (one row per environment variable value). Their columns grew over the 2.x releases
(the pinned shapes of 2.11, 2.17 and 2.21 live in ``tests/legacy/legacy_schemas.py``), so the reader
asks ``PRAGMA table_info`` and selects only the columns it knows that exist.

Two halves, so that a running ``serve`` never opens a path a client names:

- :func:`read_legacy_database` (the client side) opens the 2.x file READ-ONLY
  (``file:...?mode=ro`` URI, ``PRAGMA query_only``) and returns a :class:`LegacySource`, a
  JSON-able copy of the rows it needs;
- :func:`import_source` (the owner of the data directory) plans and applies the import
  against the repository: tasks through :class:`TaskInput` validation, ``Envs`` as global
  variables (secrets). :func:`import_qinglong` does both in one call.

Mapping of a ``Crontabs`` row:

- ``enabled = isDisabled != 1``; ``status``, ``pid``, ``log_path``, ``saved`` are ignored;
- ``task <script> [args] [-m N]``: the interpreter from the extension (``.js`` node, ``.py``
  python3, ``.sh`` bash, ``.ts`` ts-node), the script resolved against the scripts directory
  (``/ql/data/scripts/`` and ``/ql/scripts/`` prefixes are re-based onto it), ``-m N`` (also
  ``Ns``/``Nm``/``Nh``/``Nd``) becomes the timeout and leaves the argv, ``-l`` is dropped;
  the task runs in the script's directory when it exists (as 2.x does);
- any other command except ``ql ...`` runs as ``bash -c COMMAND`` (2.x ran it in a shell);
- ``task_before``/``task_after`` become ``bash -c 'BEFORE\\nCOMMAND\\nAFTER'`` with the
  command shell-quoted, and the attempt's exit status is the command's, not AFTER's;
- schedules pass through (6 fields are seconds first, ``@once`` and ``@boot`` as they are);
  each of ``extra_schedules`` becomes one more task ``<name>.<n>`` (n = 2, 3, ...) with the
  same command, because a task has one schedule (``~`` is not allowed in a task name);
- ``allow_multiple_instances = 1`` (2.21) becomes concurrency ``allow``; ``work_dir`` (2.21)
  the working directory when it exists; ``labels`` are kept;
- not imported, and reported: subscription rows (``sub_id``), ``now``/``conc``/``desi``
  modes, ``ql repo``/``ql raw`` and other ``ql`` commands, unusable schedules or scripts;
- names: characters outside ``[A-Za-z0-9._-]`` are transliterated (accents dropped) or
  replaced by ``-``; an empty result falls back to the script's stem, then ``ql2-<id>``;
  the original name is kept as label ``ql2-name:<original>``. When two rows (or an existing
  task) share a name, the later 2.x id gets ``<name>-<id>``.

Idempotency: every imported task carries label ``ql2:<id>`` (``ql2:<id>~<n>`` for an extra
schedule); a row whose key is on any task, removed ones included, is skipped as
``already_imported``. ``Envs``: the rows of one name become the values of one global
variable (source ``qinglong2``) in the 2.x order (position descending, then id), each with
its ``remarks`` and enabled unless ``status = 1`` (a disabled row is kept, disabled); a task
receives the enabled ones joined with ``&``. The push variables ``config/config.sh`` sets
(``BARK_PUSH``, ``TG_BOT_TOKEN``, ``PUSH_PLUS_TOKEN``, …;
:mod:`qinglong.local.app.legacy_config`) come as such variables too (id None), unless an
Envs row has the name. Reports name variables,
never values.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sqlite3
import unicodedata
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from qinglong.local.app.task_input import TaskInput
from qinglong.local.process.launch_request import SINGLE_STRING_MAX_BYTES
from qinglong.local.storage import variables
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.cron import parse_schedule
from qinglong.shared.errors import ConflictError, ValidationError
from qinglong.shared.names import MAX_LABELS, MAX_NAME_CHARS, is_valid_name, name_key
from qinglong.shared.variable_limits import NAME_MAX_CHARS, reserved_name_problem

SOURCE_TAG = "qinglong2"
KEY_LABEL_PREFIX = "ql2:"
NAME_LABEL_PREFIX = "ql2-name:"
DEFAULT_TIMEZONE = "Asia/Shanghai"  # the 2.x Docker images set /etc/localtime to it
GLOBAL_VARIABLES_MAX_BYTES = 24 * 1024  # within the 32 KiB the launcher budget keeps for them
MAX_ROWS = 10_000
MAX_NAME_BASE = 100

CRON_COLUMNS = (
    "id", "name", "command", "schedule", "isDisabled", "labels", "sub_id", "extra_schedules",
    "task_before", "task_after", "work_dir", "allow_multiple_instances",
)
ENV_COLUMNS = ("id", "name", "value", "status", "position", "remarks")
INTERPRETERS: Mapping[str, tuple[str, ...]] = {
    ".js": ("node",), ".py": ("python3",), ".sh": ("bash",), ".ts": ("ts-node",),
}
LEGACY_SCRIPT_ROOTS = ("/ql/data/scripts/", "/ql/scripts/")
SKIPPED_MODES = ("now", "conc", "desi")
RESERVED_VARIABLES = ("PATH", "HOME", "LANG")
_TIMEOUT = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class LegacySource:
    """What the importer needs from a 2.x database, as JSON-able data.

    ``path``: the absolute database path (for the report); ``scripts_dir``: absolute
    directory scripts are resolved against; ``cron_columns``/``env_columns``: the columns
    that were read (known ones that exist); ``crons``/``envs``: rows ``{column: value}``
    with JSON scalar values, ordered by id. ``envs`` is empty without an ``Envs`` table.
    """

    path: str
    scripts_dir: str
    cron_columns: tuple[str, ...]
    env_columns: tuple[str, ...]
    crons: tuple[dict[str, Any], ...]
    envs: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        """``{"path", "scripts_dir", "cron_columns", "env_columns", "crons", "envs"}``."""
        return {
            "path": self.path,
            "scripts_dir": self.scripts_dir,
            "cron_columns": list(self.cron_columns),
            "env_columns": list(self.env_columns),
            "crons": [dict(r) for r in self.crons],
            "envs": [dict(r) for r in self.envs],
        }

    @classmethod
    def from_json(cls, obj: Any) -> LegacySource:
        """The inverse of :meth:`to_json`. Raises ValidationError("source", ...) on any
        other shape (the message never echoes the data)."""
        try:
            crons = tuple(_row(r) for r in obj["crons"])
            envs = tuple(_row(r) for r in obj["envs"])
            source = cls(
                path=_str(obj["path"]),
                scripts_dir=_str(obj["scripts_dir"]),
                cron_columns=tuple(_str(c) for c in obj["cron_columns"]),
                env_columns=tuple(_str(c) for c in obj["env_columns"]),
                crons=crons,
                envs=envs,
            )
        except (KeyError, TypeError, ValueError):
            raise ValidationError("source", "malformed import source") from None
        if len(crons) > MAX_ROWS or len(envs) > MAX_ROWS:
            raise ValidationError("source", f"more than {MAX_ROWS} rows")
        if not os.path.isabs(source.scripts_dir):
            raise ValidationError("scripts_dir", "must be an absolute path")
        return source


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """``timezone``: IANA zone the 2.x schedules are read in; ``dry_run``: plan and report,
    change nothing."""

    timezone: str = DEFAULT_TIMEZONE
    dry_run: bool = False


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _row(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    for key, item in value.items():
        if not isinstance(key, str) or not (item is None or isinstance(item, str | int | float)):
            raise TypeError("expected scalar columns")
    return dict(value)


def default_scripts_dir(db_path: str) -> str:
    """``scripts/`` beside the database's ``db/`` directory: ``data/scripts`` for
    ``data/db/database.sqlite`` (the 2.x layout)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(db_path))), "scripts")


def read_legacy_database(db_path: str, scripts_dir: str | None = None) -> LegacySource:
    """Read ``Crontabs`` and ``Envs`` of a 2.x database without ever writing it.

    The file is opened with a ``file:...?mode=ro`` URI and ``PRAGMA query_only``; only
    known columns that ``PRAGMA table_info`` lists are selected. ``scripts_dir`` defaults
    to :func:`default_scripts_dir`.

    Raises:
        ValidationError: ``path`` (no such file), ``database`` (not SQLite, unreadable, no
            ``Crontabs`` table or no ``id``/``command`` column), ``source`` (over 10 000 rows).
    """
    path = os.path.abspath(db_path)
    if not os.path.isfile(path):
        raise ValidationError("path", "no such file")
    scripts = os.path.abspath(scripts_dir) if scripts_dir else default_scripts_dir(path)
    uri = "file:" + urllib.parse.quote(path) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    except sqlite3.Error:
        raise ValidationError("database", "cannot be opened read-only") from None
    try:
        conn.execute("PRAGMA query_only = ON")
        tables = {
            str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if "Crontabs" not in tables:
            raise ValidationError("database", "not a Qinglong 2.x database (no Crontabs table)")
        cron_columns, crons = _read_table(conn, "Crontabs", CRON_COLUMNS)
        if not {"id", "command"} <= set(cron_columns):
            raise ValidationError("database", "the Crontabs table has no id or command column")
        env_columns: tuple[str, ...] = ()
        envs: tuple[dict[str, Any], ...] = ()
        if "Envs" in tables:
            env_columns, envs = _read_table(conn, "Envs", ENV_COLUMNS)
            if not {"id", "name", "value"} <= set(env_columns):
                env_columns, envs = (), ()
    except sqlite3.Error:
        raise ValidationError("database", "not a readable SQLite database") from None
    finally:
        conn.close()
    from qinglong.local.app.legacy_config import config_path, read_push_variables

    envs += tuple({"id": None, "name": name, "value": value, "origin": "config.sh"}
                  for name, value in read_push_variables(config_path(path)))
    return LegacySource(path, scripts, cron_columns, env_columns, crons, envs)


def _read_table(
    conn: sqlite3.Connection, table: str, known: Iterable[str]
) -> tuple[tuple[str, ...], tuple[dict[str, Any], ...]]:
    present = {str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')}
    columns = tuple(c for c in known if c in present)
    if "id" not in columns:
        return columns, ()
    names = ", ".join(f'"{c}"' for c in columns)  # a whitelist: never user text
    rows = conn.execute(
        f'SELECT {names} FROM "{table}" ORDER BY "id" LIMIT ?',  # noqa: S608
        (MAX_ROWS + 1,),
    ).fetchall()
    if len(rows) > MAX_ROWS:
        raise ValidationError("source", f"more than {MAX_ROWS} rows in {table}")
    return columns, tuple(
        {c: _scalar(v) for c, v in zip(columns, row, strict=True)} for row in rows
    )


def _scalar(value: object) -> str | int | float | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)  # pragma: no cover - sqlite3 returns only the types above


# -- translation ----------------------------------------------------------------------


class _Skip(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A row (or one of its schedules) that is reported, not imported."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(slots=True)
class _Command:
    argv: tuple[str, ...]
    timeout_s: float | None
    cwd: str | None
    stem: str
    warnings: list[str] = field(default_factory=list)


def _int(value: Any) -> int | None:
    """An integer column value (Sequelize NUMBER may hold 1, 1.0 or '1'), else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_timeout(value: str) -> float:
    """``-m`` of 2.x ``task``: ``N`` seconds, or ``N`` with unit ``s``/``m``/``h``/``d``.
    Raises _Skip (code ``bad_timeout``)."""
    match = _TIMEOUT.fullmatch(value.strip())
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if seconds <= 0:
        raise _Skip("bad_timeout", "the -m value is not a positive duration")
    return seconds


def resolve_script(script: str, scripts_dir: str) -> str:
    """A 2.x script path on this machine: relative ones against ``scripts_dir``; the 2.x
    container roots ``/ql/data/scripts/`` and ``/ql/scripts/`` re-based onto it."""
    for root in LEGACY_SCRIPT_ROOTS:
        if script.startswith(root):
            return os.path.normpath(os.path.join(scripts_dir, script[len(root):]))
    return os.path.normpath(os.path.join(scripts_dir, script))


def translate_command(command: str, scripts_dir: str) -> _Command:
    """The argv, timeout and working directory of a 2.x command. Raises _Skip."""
    text = command.strip()
    if not text:
        raise _Skip("empty_command", "the command is empty")
    words = text.split()
    if words[0] == "ql":
        sub = words[1] if len(words) > 1 else ""
        if sub in ("repo", "raw"):
            raise _Skip(f"ql_{sub}", f"`ql {sub}` pulls scripts into Qinglong 2.x; fetch them "
                                     "yourself (git, curl) and add a task")
        raise _Skip("ql_command", "a Qinglong 2.x maintenance command (`ql ...`)")
    if words[0] != "task":
        cwd = scripts_dir if os.path.isdir(scripts_dir) else None
        return _Command(("bash", "-c", text), None, cwd, "")
    try:
        tokens = shlex.split(text)[1:]
    except ValueError:
        raise _Skip("unparseable", "the command's quoting does not parse") from None
    if not tokens:
        raise _Skip("empty_command", "`task` without a script")
    script, rest = tokens[0], tokens[1:]
    if rest and rest[0] in SKIPPED_MODES:
        raise _Skip(f"mode_{rest[0]}", f"`{rest[0]}` mode (per-account or concurrent runs in "
                                       "2.x) is not imported")
    timeout: float | None = None
    args: list[str] = []
    items = iter(rest)
    for item in items:
        if item == "-m":
            timeout = parse_timeout(next(items, ""))
        elif item != "-l":  # -l: follow the log live in 2.x; meaningless here
            args.append(item)
    ext = os.path.splitext(script)[1].lower()
    if ext not in INTERPRETERS:
        raise _Skip("unknown_script_type", "the script's extension has no known interpreter "
                                           "(.js, .py, .sh, .ts)")
    path = resolve_script(script, scripts_dir)
    folder = os.path.dirname(path)
    warnings = [] if os.path.isfile(path) else ["script_missing"]
    stem = os.path.splitext(os.path.basename(path))[0]
    return _Command((*INTERPRETERS[ext], path, *args), timeout,
                    folder if os.path.isdir(folder) else None, stem, warnings)


def wrap_hooks(command: _Command, before: str, after: str) -> tuple[str, ...]:
    """``bash -c 'BEFORE\\nCOMMAND\\nAFTER'`` in one attempt; the command is shell-quoted
    (or kept as the 2.x shell text) and its exit status is the attempt's."""
    if not before and not after:
        return command.argv
    argv = command.argv
    body = argv[2] if argv[:2] == ("bash", "-c") else shlex.join(argv)
    lines = [before] if before else []
    lines += [body, "ql3_status=$?"]
    if after:
        lines.append(after)
    lines.append('exit "$ql3_status"')
    return ("bash", "-c", "\n".join(lines))


def task_name_base(raw: str) -> str:
    """A deterministic task-name base for any text (``shared/names.py``'s rule): the 2.x
    name itself when it is a valid name (``京东签到`` stays ``京东签到``), else NFC with
    every character the rule refuses replaced by ``-`` (runs of them by one), leading
    characters other than letters and digits dropped, at most 100 characters; ``""`` when
    nothing usable is left."""
    text = unicodedata.normalize("NFC", raw.strip())
    if is_valid_name(text) and len(text) <= MAX_NAME_BASE:
        return text
    text = "".join(ch if is_valid_name("a" + ch + "a") else "-" for ch in text)
    text = re.sub(r"-{2,}", "-", text)
    while text and not is_valid_name(text[0]):
        text = text[1:]
    text = text[:MAX_NAME_BASE].rstrip(" -")
    return text if is_valid_name(text) else ""


def _labels(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if not isinstance(value, list):
        return []
    kept = [
        _fit_label(item) for item in value
        if isinstance(item, str) and _fit_label(item)
        and not item.strip().startswith((KEY_LABEL_PREFIX, NAME_LABEL_PREFIX))  # ours only
    ]
    return list(dict.fromkeys(kept))[:MAX_LABELS - 2]  # room for the import's own two


def _fit_label(text: str) -> str:
    """``text`` made a label the free-label rule accepts (shared/names.py): NFC, control
    and format characters dropped, cut to 128 characters, outer spaces stripped ('' when
    nothing is left)."""
    text = unicodedata.normalize("NFC", text)
    text = "".join(c for c in text if unicodedata.category(c)[0] != "C")
    return text.strip()[:MAX_NAME_CHARS].strip()


def _extra_schedules(value: Any, primary: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if not isinstance(value, list):
        return []
    found: list[str] = []
    for item in value:
        schedule = _text(item.get("schedule")) if isinstance(item, dict) else ""
        if schedule and schedule != primary and schedule not in found:
            found.append(schedule)
    return found


# -- planning and applying ---------------------------------------------------------------


@dataclass(slots=True)
class _Unit:
    """One task to create: a row's primary schedule (``extra`` 0) or extra schedule n."""

    source_id: int
    key: str
    extra: int
    original_name: str
    schedule: str
    command: _Command
    argv: tuple[str, ...]
    enabled: bool
    labels: list[str]
    concurrency: str
    name: str = ""


def import_source(
    repo: LocalRunRepository, source: LegacySource, options: ImportOptions | None = None
) -> dict[str, Any]:
    """Plan and (unless ``options.dry_run``) apply an import; returns the report.

    Report shape (JSON-able, values of variables never included)::

        {"source": path, "scripts_dir": dir, "dry_run": bool, "timezone": tz,
         "columns": {"Crontabs": [...], "Envs": [...]},
         "tasks": {"imported": [{"id", "key", "name", "original_name", "schedule",
                                 "extra_schedule", "argv", "enabled", "timeout_s",
                                 "concurrency", "cwd", "labels", "warnings"}],
                   "skipped": [{"id", "key", "name", "code", "reason"}]},
         "variables": {"imported": [{"name", "values", "enabled", "status", "ids"}],
                       "skipped": [{"id", "name", "code", "reason"}]},
         "summary": {"tasks_imported", "tasks_skipped", "variables_imported",
                     "variables_skipped"}}

    ``status`` of a variable: ``new``, ``updated`` or ``unchanged``. In a dry run
    "imported" means "would be imported". Raises ValidationError("timezone", ...) for an
    unknown zone before anything changes; storage errors propagate (tasks created before
    stay; importing again continues idempotently).
    """
    opts = options or ImportOptions()
    parse_schedule("@once", opts.timezone)  # a bad zone fails the import, not every row
    imported: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for unit in _plan_tasks(repo, source, skipped):
        try:
            task = TaskInput(
                name=unit.name,
                argv=unit.argv,
                schedule=unit.schedule,
                timezone=opts.timezone,
                cwd=unit.command.cwd,
                timeout_s=unit.command.timeout_s,
                concurrency=unit.concurrency,
                labels=tuple(unit.labels),
            ).to_task()
            if not unit.enabled:
                task = replace(task, enabled=False)
            if not opts.dry_run:
                repo.create_task(task)
        except ValidationError as exc:
            skipped.append(_skip_view(unit.source_id, unit.key, unit.original_name,
                                      f"invalid_{exc.field}", str(exc)))
            continue
        except ConflictError:
            skipped.append(_skip_view(unit.source_id, unit.key, unit.original_name,
                                      "name_taken", f"a task named {unit.name} exists"))
            continue
        imported.append({
            "id": unit.source_id, "key": unit.key, "name": unit.name,
            "original_name": unit.original_name, "schedule": unit.schedule,
            "extra_schedule": unit.extra or None, "argv": list(unit.argv),
            "enabled": unit.enabled, "timeout_s": unit.command.timeout_s,
            "concurrency": unit.concurrency, "cwd": unit.command.cwd,
            "labels": list(unit.labels), "warnings": list(unit.command.warnings),
        })
    variables, var_skipped = _import_variables(repo, source, opts.dry_run)
    skipped.sort(key=lambda s: (s["id"] if isinstance(s["id"], int) else -1, s["key"] or ""))
    return {
        "source": source.path,
        "scripts_dir": source.scripts_dir,
        "dry_run": opts.dry_run,
        "timezone": opts.timezone,
        "columns": {"Crontabs": list(source.cron_columns), "Envs": list(source.env_columns)},
        "tasks": {"imported": imported, "skipped": skipped},
        "variables": {"imported": variables, "skipped": var_skipped},
        "summary": {
            "tasks_imported": len(imported),
            "tasks_skipped": len(skipped),
            "variables_imported": len(variables),
            "variables_skipped": len(var_skipped),
        },
    }


def _skip_view(
    source_id: int | None, key: str | None, name: str, code: str, reason: str
) -> dict[str, Any]:
    return {"id": source_id, "key": key, "name": name, "code": code, "reason": reason}


def _plan_tasks(
    repo: LocalRunRepository, source: LegacySource, skipped: list[dict[str, Any]]
) -> list[_Unit]:
    """Translate every row, then name the units (later duplicates get ``-<id>``)."""
    done: dict[str, str] = {}
    for task in repo.list_tasks_including_removed():
        for label in task.labels:
            if label.startswith(KEY_LABEL_PREFIX):
                done.setdefault(label[len(KEY_LABEL_PREFIX):], task.name)
    live = {name_key(task.name) for task in repo.list_tasks()}
    rows: list[tuple[str, list[_Unit]]] = []
    for row in source.crons:
        source_id = _int(row.get("id"))
        name = _text(row.get("name"))
        if source_id is None:
            skipped.append(_skip_view(None, None, name, "no_id", "the row has no id"))
            continue
        try:
            base, units = _translate_row(row, source_id, name, source.scripts_dir)
        except _Skip as skip:
            skipped.append(_skip_view(source_id, str(source_id), name, skip.code, skip.reason))
            continue
        rows.append((base, units))
    taken = set(live)
    seen: set[str] = set()
    plan: list[_Unit] = []
    for base, units in rows:
        primary = units[0]
        free = name_key(base) not in seen and name_key(base) not in taken
        name = base if free else f"{base}-{primary.source_id}"
        seen.add(name_key(base))
        for unit in units:
            unit.name = name if unit.extra == 0 else f"{name}.{unit.extra}"
            if unit.key in done:
                skipped.append(_skip_view(unit.source_id, unit.key, unit.original_name,
                                          "already_imported",
                                          f"imported before as task {done[unit.key]}"))
                continue
            if name_key(unit.name) in taken:
                skipped.append(_skip_view(unit.source_id, unit.key, unit.original_name,
                                          "name_taken", f"a task named {unit.name} exists"))
                continue
            taken.add(name_key(unit.name))
            if unit.original_name and unit.name != unit.original_name:
                unit.labels.append(_fit_label(NAME_LABEL_PREFIX + unit.original_name))
            unit.labels.append(KEY_LABEL_PREFIX + unit.key)
            plan.append(unit)
    return plan


def _translate_row(
    row: Mapping[str, Any], source_id: int, name: str, scripts_dir: str
) -> tuple[str, list[_Unit]]:
    """The name base and the units (primary first) of one row. Raises _Skip."""
    if _int(row.get("sub_id")) is not None:
        raise _Skip("subscription", "managed by a 2.x subscription (sub_id); not imported")
    command = translate_command(_text(row.get("command")), scripts_dir)
    work_dir = _text(row.get("work_dir"))
    if work_dir:
        folder = os.path.normpath(os.path.join(scripts_dir, work_dir))
        if os.path.isdir(folder):
            command.cwd = folder
        else:
            command.warnings.append("work_dir_missing")
    argv = wrap_hooks(command, _text(row.get("task_before")), _text(row.get("task_after")))
    base = task_name_base(name) or task_name_base(command.stem) or f"ql2-{source_id}"
    enabled = _int(row.get("isDisabled")) != 1
    concurrency = "allow" if _int(row.get("allow_multiple_instances")) == 1 else "forbid"
    labels = _labels(row.get("labels"))
    schedule = _text(row.get("schedule"))
    schedules = [schedule, *_extra_schedules(row.get("extra_schedules"), schedule)]
    units = [
        _Unit(source_id=source_id, key=str(source_id) if n == 0 else f"{source_id}~{n + 1}",
              extra=0 if n == 0 else n + 1, original_name=name, schedule=s, command=command,
              argv=argv, enabled=enabled, labels=list(labels), concurrency=concurrency)
        for n, s in enumerate(schedules)
    ]
    return base, units


def _import_variables(
    repo: LocalRunRepository, source: LegacySource, dry_run: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Enabled ``Envs`` rows joined by name with ``&`` (position descending, then id)."""
    skipped: list[dict[str, Any]] = []
    groups: dict[str, list[tuple[float, int, str, str, bool]]] = {}
    in_envs = {_text(r.get("name")) for r in source.envs if r.get("origin") != "config.sh"}
    for row in source.envs:
        source_id = _int(row.get("id"))
        name = _text(row.get("name"))
        value = row.get("value")
        if row.get("origin") == "config.sh" and name in in_envs:
            continue  # an Envs row of the same name wins (2.x exports Envs after config.sh)
        if (not _ENV_NAME.fullmatch(name) or len(name) > NAME_MAX_CHARS
                or name.startswith(("QL3_RECEIPT_", "QL3_LAUNCH_"))):
            skipped.append(_skip_view(source_id, None, name, "invalid_name",
                                      "not usable as a variable name ([A-Za-z_][A-Za-z0-9_]*,"
                                      " 1-128 characters)"))
            continue
        if name in RESERVED_VARIABLES or reserved_name_problem(name) is not None:
            skipped.append(_skip_view(source_id, None, name, "reserved_name",
                                      "the runtime sets this variable itself, or it changes "
                                      "how processes are loaded (LD_*)"))
            continue
        if not isinstance(value, str | int | float) or "\x00" in str(value):
            skipped.append(_skip_view(source_id, None, name, "invalid_value",
                                      "the value is empty or holds a NUL byte"))
            continue
        position = row.get("position")
        order = float(position) if isinstance(position, int | float) else -math.inf
        remark = " ".join(_text(row.get("remarks")).split())[:200]
        groups.setdefault(name, []).append(
            (-order, source_id or 0, str(value), remark, _int(row.get("status")) != 1))
    current = repo.global_variables()
    budget = sum(
        len(f"{k}={v}".encode()) + 1 for k, v in current.items() if k not in groups
    )
    imported: list[dict[str, Any]] = []
    for name in sorted(groups):
        parts = sorted(groups[name])
        values = [[p[2], p[3], p[4]] for p in parts]
        ids = [p[1] for p in parts]
        value = "&".join(p[2] for p in parts if p[4])
        size = len(f"{name}={value}".encode("utf-8", "surrogateescape")) + 1 if value else 0
        if size > SINGLE_STRING_MAX_BYTES or budget + size > GLOBAL_VARIABLES_MAX_BYTES:
            skipped.extend(
                _skip_view(i, None, name, "too_large",
                           f"global variables are limited to {GLOBAL_VARIABLES_MAX_BYTES} bytes")
                for i in ids
            )
            continue
        budget += size
        old = repo.db.read(partial(variables.values_of, name=name))
        status = "new" if old is None else "unchanged" if old == values else "updated"
        if not dry_run and status != "unchanged":
            def edit(vals: variables.Values, new: variables.Values = values) -> None:
                vals[:] = new

            variables.change(repo.db, repo.clock(), name, edit, source=SOURCE_TAG)
        imported.append({"name": name, "values": len(parts),
                         "enabled": sum(1 for p in parts if p[4]), "status": status,
                         "ids": ids})
    return imported, skipped


def import_qinglong(
    repo: LocalRunRepository,
    db_path: str,
    *,
    scripts_dir: str | None = None,
    timezone: str = DEFAULT_TIMEZONE,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Read ``db_path`` read-only and import it into ``repo``; returns the report of
    :func:`import_source`. Raises ValidationError as :func:`read_legacy_database`."""
    source = read_legacy_database(db_path, scripts_dir)
    return import_source(repo, source, ImportOptions(timezone=timezone, dry_run=dry_run))
