"""Importing Qinglong 2.x databases built from the pinned 2.11, 2.17 and 2.21 DDL
(legacy_schemas.py) through the function API: tasks, report, idempotency, dry run, and a
2.x file that is never written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from legacy_dbkit import SECRETS, build_install

from qinglong.local.app.legacy_import import (
    ImportOptions,
    LegacySource,
    import_qinglong,
    import_source,
    read_legacy_database,
    task_name_base,
    translate_command,
)
from qinglong.local.storage import variables
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task
from qinglong.shared.errors import ValidationError

VERSIONS = ("2.11", "2.17", "2.21", "2.11-upgraded-to-2.17")


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[LocalRunRepository]:
    db = open_database(str(tmp_path / "ql3.db"))
    yield LocalRunRepository(db)
    db.close()


def _tasks(repo: LocalRunRepository) -> dict[str, Task]:
    return {t.name: t for t in repo.list_tasks()}


def _codes(report: dict[str, Any]) -> dict[str | None, str]:
    return {row["key"]: row["code"] for row in report["tasks"]["skipped"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_pinned_version_imports_its_crons(
    tmp_path: Path, repo: LocalRunRepository, version: str
) -> None:
    install = build_install(tmp_path / "ql", version)
    report = import_qinglong(repo, str(install.db))
    tasks = _tasks(repo)
    scripts = str(install.scripts)
    assert report["scripts_dir"] == scripts  # data/db/database.sqlite -> data/scripts

    sign = tasks["京东签到"]  # a valid name stays the task's name (shared/names.py)
    assert sign.schedule == "0 5 8 * * *"  # 6 fields, seconds first, as 2.x wrote it
    assert sign.argv == ("node", f"{scripts}/jd_sign.js")
    assert sign.cwd == scripts
    assert sign.timezone == "Asia/Shanghai"
    assert sign.labels == ("jd", "daily", "ql2:1")  # no ql2-name: label, the name is kept
    assert tasks["Boot job"].schedule == "@boot"
    assert tasks["Boot job"].argv == ("bash", f"{scripts}/boot.sh")
    manual = tasks["manual"]
    assert (manual.schedule, manual.argv) == ("@once", ("python3", f"{scripts}/tools/manual.py"))
    assert manual.cwd == f"{scripts}/tools"
    assert tasks["disabled"].enabled is False
    assert all(t.enabled for n, t in tasks.items() if n != "disabled")
    slow = tasks["timeout"]
    assert (slow.timeout_s, slow.argv) == (30.0, ("python3", f"{scripts}/slow.py"))
    assert tasks["dup"].argv[1].endswith("dup_a.js")
    assert tasks["dup-8"].argv[1].endswith("dup_b.js")
    assert "ql2-name:dup" in tasks["dup-8"].labels
    cafe = tasks["Café Sync"]
    assert cafe.argv == ("ts-node", f"{scripts}/cafe.ts", "arg1")  # /ql/data/scripts re-based
    assert "ql2-name:Café Sync!" in cafe.labels
    assert tasks["shell"].argv == ("bash", "-c", "echo hi && date")

    codes = _codes(report)
    assert codes["5"] == "ql_repo"
    assert codes["10"] == "mode_conc"
    assert "ql2:5" not in {label for t in tasks.values() for label in t.labels}
    expected = {"2.11": (9, 2), "2.17": (12, 3), "2.21": (13, 3)}.get(version, (12, 3))
    assert (len(tasks), report["summary"]["tasks_skipped"]) == expected


@pytest.mark.parametrize("version", ["2.17", "2.21", "2.11-upgraded-to-2.17"])
def test_subscriptions_extra_schedules_and_hooks(
    tmp_path: Path, repo: LocalRunRepository, version: str
) -> None:
    install = build_install(tmp_path / "ql", version)
    report = import_qinglong(repo, str(install.db))
    tasks = _tasks(repo)
    scripts = str(install.scripts)
    assert _codes(report)["11"] == "subscription"
    assert tasks["multi"].schedule == "0 8 * * *"
    extra = tasks["multi.2"]  # the one distinct extra schedule: a task of its own
    assert (extra.schedule, extra.argv) == ("0 20 * * *", tasks["multi"].argv)
    assert "ql2:12~2" in extra.labels
    assert "multi.3" not in tasks  # the duplicate of the primary schedule adds nothing
    hooks = tasks["hooks"]
    assert hooks.argv == (
        "bash", "-c",
        f"echo before\nbash {scripts}/hook.sh 'a b'\nql3_status=$?\necho after\n"
        'exit "$ql3_status"',
    )
    imported = {row["key"]: row for row in report["tasks"]["imported"]}
    assert imported["12~2"]["extra_schedule"] == 2
    if version == "2.21":
        inst = tasks["multi-inst"]
        assert inst.concurrency.value == "allow"
        assert inst.cwd == f"{scripts}/tools"  # work_dir


def test_envs_become_joined_global_variables(tmp_path: Path, repo: LocalRunRepository) -> None:
    install = build_install(tmp_path / "ql", "2.17")
    report = import_qinglong(repo, str(install.db))
    assert repo.global_variables() == {
        "JD_COOKIE": "secret-two&secret-one",  # position descending, as 2.x lists them
        "PLAIN": "plain-secret",
    }
    assert [(v["name"], v["values"], v["enabled"], v["status"], v["ids"])
            for v in report["variables"]["imported"]] == [
        ("JD_COOKIE", 2, 2, "new", [2, 1]), ("PLAIN", 1, 1, "new", [5]),
        ("TOKEN", 1, 0, "new", [3])]  # a disabled row is kept, disabled
    skipped = {row["id"]: row["code"] for row in report["variables"]["skipped"]}
    assert skipped == {4: "invalid_name"}
    assert [n for n, s, _ in repo.list_global_variables()] == ["JD_COOKIE", "PLAIN", "TOKEN"]
    assert {s for _, s, _ in repo.list_global_variables()} == {"qinglong2"}
    values = {v["name"]: [(x["remark"], x["enabled"]) for x in v["values"]]
              for v in repo.db.read(variables.entries)}
    assert values["JD_COOKIE"] == [("账号二", True), ("", True)]
    assert values["TOKEN"] == [("", False)]
    text = repr(report)
    assert not [s for s in SECRETS if s in text]


def test_envs_the_runtime_or_the_loader_owns_are_skipped_as_reserved(
        tmp_path: Path, repo: LocalRunRepository) -> None:
    """The setters' rule (``shared/variable_limits.check_settable_name``) and the runtime's
    own PATH/HOME/LANG: skipped with code ``reserved_name``, the others imported."""
    envs = [{"id": n, "name": name, "value": "v"} for n, name in enumerate(
        ("PATH", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "QL3_DATA_DIR", "NODE_OPTIONS"), 1)]
    install = build_install(tmp_path / "ql", "2.17", envs=envs)
    report = import_qinglong(repo, str(install.db))
    skipped = {row["id"]: row["code"] for row in report["variables"]["skipped"]}
    assert skipped == dict.fromkeys((1, 2, 3, 4, 5), "reserved_name")
    assert repo.global_variables() == {"NODE_OPTIONS": "v"}


def test_reimport_is_idempotent(tmp_path: Path, repo: LocalRunRepository) -> None:
    install = build_install(tmp_path / "ql", "2.21")
    first = import_qinglong(repo, str(install.db))
    before = {t.name: t.id for t in repo.list_tasks()}
    second = import_qinglong(repo, str(install.db))
    assert {t.name: t.id for t in repo.list_tasks()} == before
    assert second["summary"]["tasks_imported"] == 0
    again = [r for r in second["tasks"]["skipped"] if r["code"] == "already_imported"]
    assert len(again) == first["summary"]["tasks_imported"]
    assert {v["status"] for v in second["variables"]["imported"]} == {"unchanged"}
    # A removed imported task stays imported: it is not brought back.
    repo.remove_task("dup")
    third = import_qinglong(repo, str(install.db))
    assert third["summary"]["tasks_imported"] == 0
    assert "dup" not in _tasks(repo)


def test_a_new_row_after_an_import_gets_the_id_suffix(
    tmp_path: Path, repo: LocalRunRepository
) -> None:
    install = build_install(tmp_path / "ql", "2.17")
    import_qinglong(repo, str(install.db))
    conn = sqlite3.connect(install.db)
    conn.execute("INSERT INTO Crontabs (id, name, command, schedule, createdAt, updatedAt)"
                 " VALUES (40, 'manual', 'task other.py', '0 4 * * *', 'x', 'x')")
    conn.commit()
    conn.close()
    report = import_qinglong(repo, str(install.db))
    assert [r["name"] for r in report["tasks"]["imported"]] == ["manual-40"]
    assert "script_missing" in report["tasks"]["imported"][0]["warnings"]


def test_dry_run_changes_nothing_and_reports_the_same(
    tmp_path: Path, repo: LocalRunRepository
) -> None:
    install = build_install(tmp_path / "ql", "2.21")
    dry = import_qinglong(repo, str(install.db), dry_run=True)
    assert repo.list_tasks() == []
    assert repo.global_variables() == {}
    assert dry["dry_run"] is True
    real = import_qinglong(repo, str(install.db))
    assert [r["name"] for r in dry["tasks"]["imported"]] == [
        r["name"] for r in real["tasks"]["imported"]]
    assert dry["variables"]["imported"] == real["variables"]["imported"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_2x_file_is_never_written(
    tmp_path: Path, repo: LocalRunRepository, version: str
) -> None:
    install = build_install(tmp_path / "ql", version)
    digest, listing = install.digest(), install.db_dir_listing()
    import_qinglong(repo, str(install.db), dry_run=True)
    import_qinglong(repo, str(install.db))
    import_qinglong(repo, str(install.db))
    assert install.digest() == digest
    assert install.db_dir_listing() == listing  # no -journal, -wal or -shm left behind


def test_only_known_existing_columns_are_read(tmp_path: Path) -> None:
    install = build_install(tmp_path / "ql", "2.11")
    source = read_legacy_database(str(install.db))
    assert source.cron_columns == ("id", "name", "command", "schedule", "isDisabled", "labels")
    assert source.env_columns == ("id", "name", "value", "status", "position", "remarks")
    assert LegacySource.from_json(source.to_json()) == source
    upgraded = read_legacy_database(str(build_install(tmp_path / "up", "2.21").db))
    assert "work_dir" in upgraded.cron_columns and "pid" not in upgraded.cron_columns


def test_not_a_2x_database_is_refused(tmp_path: Path, repo: LocalRunRepository) -> None:
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE things (id INTEGER)")
    conn.close()
    with pytest.raises(ValidationError, match="no Crontabs table"):
        import_qinglong(repo, str(other))
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ValidationError, match="database"):
        import_qinglong(repo, str(garbage))
    with pytest.raises(ValidationError, match="no such file"):
        import_qinglong(repo, str(tmp_path / "missing.sqlite"))
    with pytest.raises(ValidationError, match="source"):
        LegacySource.from_json({"crons": [{"id": [1]}]})


def test_explicit_scripts_dir_and_timezone(tmp_path: Path, repo: LocalRunRepository) -> None:
    install = build_install(tmp_path / "ql", "2.11")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = read_legacy_database(str(install.db), str(elsewhere))
    report = import_source(repo, source, ImportOptions(timezone="UTC"))
    task = _tasks(repo)["manual"]
    assert task.argv == ("python3", f"{elsewhere}/tools/manual.py")
    assert task.timezone == "UTC"
    assert task.cwd is None  # the script's directory does not exist there
    assert "script_missing" in {w for r in report["tasks"]["imported"] for w in r["warnings"]}


def test_unusable_rows_are_reported_not_imported(tmp_path: Path, repo: LocalRunRepository) -> None:
    crons = [
        {"id": 1, "name": "bad cron", "command": "task a.js", "schedule": "61 * * * *"},
        {"id": 2, "name": "bad m", "command": "task a.js -m soon", "schedule": "0 * * * *"},
        {"id": 3, "name": "binary", "command": "task a.bin", "schedule": "0 * * * *"},
        {"id": 4, "name": "update", "command": "ql update", "schedule": "0 * * * *"},
        {"id": 5, "name": "raw", "command": "ql raw https://example.invalid/a.js",
         "schedule": "0 * * * *"},
        {"id": 6, "name": "now", "command": "task a.js now", "schedule": "0 * * * *"},
        {"id": 7, "name": "desi", "command": "task a.js desi JD_COOKIE 1", "schedule": "1 * * * *"},
        {"id": 8, "name": "quote", "command": "task 'a.js", "schedule": "0 * * * *"},
        {"id": 9, "name": "empty", "command": "  ", "schedule": "0 * * * *"},
        {"id": 10, "name": "minutes", "command": "task a.js -m 2m -l", "schedule": "0 * * * *"},
    ]
    install = build_install(tmp_path / "ql", "2.11", crons=crons, envs=[])
    report = import_qinglong(repo, str(install.db))
    assert _codes(report) == {
        "1": "invalid_schedule", "2": "bad_timeout", "3": "unknown_script_type",
        "4": "ql_command", "5": "ql_raw", "6": "mode_now", "7": "mode_desi",
        "8": "unparseable", "9": "empty_command",
    }
    assert [(t.name, t.timeout_s, t.argv[2:]) for t in repo.list_tasks()] == [
        ("minutes", 120.0, ())]


def test_names_are_transliterated_deterministically() -> None:
    assert task_name_base("Café Sync!") == "Café Sync"
    assert task_name_base("京东签到") == "京东签到"
    assert task_name_base("JD 签到 v2.0") == "JD 签到 v2.0"
    assert task_name_base("签到/每日#1") == "签到-每日-1"
    assert task_name_base("__x") == "x"
    assert task_name_base("a" * 300) == "a" * 100
    assert translate_command("task /ql/scripts/x.py", "/s").argv == ("python3", "/s/x.py")
    assert translate_command("task /opt/y.sh", "/s").argv == ("bash", "/opt/y.sh")


def test_labels_and_names_edge_cases(tmp_path: Path, repo: LocalRunRepository) -> None:
    crons = [
        {"id": 1, "name": None, "command": "task 京东.js", "schedule": "0 * * * *",
         "labels": ["ql2:99", "keep", " ", "ql2-name:forged"]},
        {"id": 2, "name": "", "command": "task other.js", "schedule": "0 * * * *",
         "labels": "not json"},
    ]
    install = build_install(tmp_path / "ql", "2.11", crons=crons, envs=[])
    import_qinglong(repo, str(install.db))
    assert [(t.name, t.labels) for t in repo.list_tasks()] == [
        ("other", ("ql2:2",)), ("京东", ("keep", "ql2:1"))]
    with pytest.raises(ValidationError, match="timezone"):
        import_qinglong(repo, str(install.db), timezone="Nowhere/Else")
