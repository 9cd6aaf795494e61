"""Pinned Qinglong 2.x database schemas: the DDL the legacy tests BUILD databases from.

Qinglong 2.x (``whyour/qinglong``) keeps its state in ``data/db/database.sqlite``, written by
Sequelize on SQLite. The models are ``back/data/cron.ts`` (``sequelize.define('Crontab', ...)``,
table ``Crontabs``) and ``back/data/env.ts`` (``define('Env', ...)``, table ``Envs``); the
tables are created by ``Model.sync()`` in ``back/loaders/db.ts``, which also adds columns to
existing databases with ``alter table ... add column`` (errors ignored when they exist).

Sequelize's SQLite mapping used below: ``DataTypes.STRING`` -> ``VARCHAR(255)``, ``NUMBER`` ->
``NUMBER``, ``BOOLEAN`` -> ``TINYINT(1)``, ``JSON`` -> ``JSON`` (text), the implicit ``id``
``INTEGER PRIMARY KEY AUTOINCREMENT`` and ``createdAt``/``updatedAt`` ``DATETIME NOT NULL``
(text like ``2024-09-13 15:00:00.000 +00:00``); ``unique: 'compositeIndex'`` on several
attributes -> one ``UNIQUE (...)`` over them.

Evidence (read through the code index; tag commits of ``v2.11.x``/``v2.21.x`` were not
available there, so each shape is pinned from the closest evidence, stated per version):

2.11 (the first SQLite release):
    ``whyour/qinglong@56132ceb`` ``back/loaders/db.ts`` carries the "2.10-2.11 升级" block that
    copies the nedb files (``db/crontab.db``, ``db/env.db``) into the new Sequelize tables and
    adds no Crontabs/Envs columns. ``whyour/qinglong@a256ada8`` ``back/data/cron.ts``: columns
    name, command, schedule (composite unique), timestamp, saved, status, isSystem, pid,
    isDisabled, isPinned, log_path, labels (JSON), last_running_time, last_execution_time;
    status enum running/idle/disabled/queued = 0..3, which matches the 2.11.0 log in
    whyour/qinglong issue #1098 (``UPDATE `Crontabs` SET `status`=... WHERE `status` IN (0, 3)``).
    ``whyour/qinglong@2aec1f98`` ``back/data/env.ts`` (same era: ``initEnvPosition``):
    value + name (composite unique), timestamp, status (0 normal, 1 disabled), position,
    remarks.

2.17 (pinned from 2.17.11):
    ``pengtao211/qinglong-dev@356b2e2d`` is an unmodified 2.17.11 tree (its ``version.yaml``:
    ``version: 2.17.11``, publishTime 2024-09-13). ``back/data/cron.ts`` adds to 2.11:
    ``sub_id: { type: NUMBER, allowNull: true }``, ``extra_schedules: JSON``, ``task_before:
    STRING``, ``task_after: STRING`` (status enum running=0, queued=0.5, idle=1, disabled=2).
    ``back/loaders/db.ts`` adds them to older databases as ``sub_id NUMBER``,
    ``extra_schedules JSON``, ``task_before TEXT``, ``task_after TEXT`` (see
    ``CRONTABS_2_11_TO_2_17`` for a 2.11 database upgraded in place). ``back/data/env.ts``:
    unchanged from 2.11.

2.21 (pinned from 2.21.0):
    The 2.21.0 ``version.yaml`` changelog (seen in a fork's diff that replaces it) lists
    "定时任务增加 work_dir 设置", "增加运行实例功能", "增加任务统计功能", "增加环境变量标签功能".
    ``kyle66889/JobCenter`` (a fork of that release) ``back/data/cron.ts`` adds ``log_name:
    STRING``, ``allow_multiple_instances: NUMBER``, ``work_dir: STRING`` (plus its own
    ``notify_emails``, which the fork's plan document says it added itself: not pinned here);
    its ``back/loaders/db.ts`` migration list adds ``Crontabs log_name VARCHAR(255)``,
    ``allow_multiple_instances NUMBER``, ``work_dir VARCHAR(255)``, ``Envs isPinned NUMBER``
    and ``Envs labels JSON``. Upstream ``whyour/qinglong@00b1bc71`` (between 2.17 and 2.21)
    shows ``log_name`` and an Envs pin column spelled ``is_pinned``: the importer reads only
    known columns that exist, so either spelling is harmless.
"""

from __future__ import annotations

_CRON_2_11_COLUMNS = (
    "`id` INTEGER PRIMARY KEY AUTOINCREMENT, `name` VARCHAR(255), `command` VARCHAR(255),"
    " `schedule` VARCHAR(255), `timestamp` VARCHAR(255), `saved` TINYINT(1), `status` NUMBER,"
    " `isSystem` NUMBER, `pid` NUMBER, `isDisabled` NUMBER, `isPinned` NUMBER,"
    " `log_path` VARCHAR(255), `labels` JSON, `last_running_time` NUMBER,"
    " `last_execution_time` NUMBER"
)
_CRON_2_17_EXTRA = (
    ", `sub_id` NUMBER, `extra_schedules` JSON, `task_before` VARCHAR(255),"
    " `task_after` VARCHAR(255)"
)
_CRON_2_21_EXTRA = (
    ", `log_name` VARCHAR(255), `allow_multiple_instances` NUMBER, `work_dir` VARCHAR(255)"
)
_TIMESTAMPS = ", `createdAt` DATETIME NOT NULL, `updatedAt` DATETIME NOT NULL"
_CRON_UNIQUE = ", UNIQUE (`name`, `command`, `schedule`)"

_ENV_2_11_COLUMNS = (
    "`id` INTEGER PRIMARY KEY AUTOINCREMENT, `value` VARCHAR(255), `timestamp` VARCHAR(255),"
    " `status` NUMBER, `position` NUMBER, `name` VARCHAR(255), `remarks` VARCHAR(255)"
)
_ENV_2_21_EXTRA = ", `isPinned` NUMBER, `labels` JSON"
_ENV_UNIQUE = ", UNIQUE (`value`, `name`)"


def _table(name: str, columns: str, unique: str) -> str:
    return f"CREATE TABLE IF NOT EXISTS `{name}` ({columns}{_TIMESTAMPS}{unique});"


SCHEMAS: dict[str, tuple[str, ...]] = {
    "2.11": (
        _table("Crontabs", _CRON_2_11_COLUMNS, _CRON_UNIQUE),
        _table("Envs", _ENV_2_11_COLUMNS, _ENV_UNIQUE),
    ),
    "2.17": (
        _table("Crontabs", _CRON_2_11_COLUMNS + _CRON_2_17_EXTRA, _CRON_UNIQUE),
        _table("Envs", _ENV_2_11_COLUMNS, _ENV_UNIQUE),
    ),
    "2.21": (
        _table("Crontabs", _CRON_2_11_COLUMNS + _CRON_2_17_EXTRA + _CRON_2_21_EXTRA,
               _CRON_UNIQUE),
        _table("Envs", _ENV_2_11_COLUMNS + _ENV_2_21_EXTRA, _ENV_UNIQUE),
    ),
}
"""Fresh-install DDL per pinned version (what ``Model.sync()`` creates)."""

CRONTABS_2_11_TO_2_17 = (
    "alter table Crontabs add column sub_id NUMBER",
    "alter table Crontabs add column extra_schedules JSON",
    "alter table Crontabs add column task_before TEXT",
    "alter table Crontabs add column task_after TEXT",
)
"""What 2.17.11's ``back/loaders/db.ts`` runs on a 2.11 database: columns appended last."""

SCHEMAS["2.11-upgraded-to-2.17"] = (*SCHEMAS["2.11"], *CRONTABS_2_11_TO_2_17)

# Columns each pinned Crontabs/Envs table has (for builders and assertions).
CRON_COLUMNS_2_11 = (
    "id", "name", "command", "schedule", "timestamp", "saved", "status", "isSystem", "pid",
    "isDisabled", "isPinned", "log_path", "labels", "last_running_time", "last_execution_time",
    "createdAt", "updatedAt",
)
CRON_COLUMNS_2_17_ADDED = ("sub_id", "extra_schedules", "task_before", "task_after")
CRON_COLUMNS_2_21_ADDED = ("log_name", "allow_multiple_instances", "work_dir")
ENV_COLUMNS_2_11 = (
    "id", "value", "timestamp", "status", "position", "name", "remarks", "createdAt",
    "updatedAt",
)
ENV_COLUMNS_2_21_ADDED = ("isPinned", "labels")
