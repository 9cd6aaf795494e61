"""`ql3 local import-qinglong` and `ql3 local vars list` through the real command line
(subprocess, QL3_DATA_DIR): report, idempotency, dry run, an unchanged 2.x file, secrets
that never appear in any output, and a task that really receives a global variable."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from legacy_dbkit import QL3, SECRETS, Ql3Cli, build_install


@pytest.fixture
def cli(tmp_path: Path) -> Ql3Cli:
    runner = Ql3Cli(tmp_path / "ql3-data")
    runner.run("init", "--profile", "edge")
    return runner


def _no_secrets(cli: Ql3Cli) -> None:
    leaked = [s for s in SECRETS if any(s in out for out in cli.outputs)]
    assert leaked == []


def test_import_json_report_then_idempotent_reimport(tmp_path: Path, cli: Ql3Cli) -> None:
    install = build_install(tmp_path / "ql", "2.21")
    digest, listing = install.digest(), install.db_dir_listing()

    dry = cli.json("import-qinglong", str(install.db), "--dry-run")
    assert dry["dry_run"] is True and dry["summary"]["tasks_imported"] == 13
    assert cli.json("task", "list") == []
    assert cli.json("vars", "list") == []

    report = cli.json("import-qinglong", str(install.db))
    assert report["summary"] == {"tasks_imported": 13, "tasks_skipped": 3,
                                 "variables_imported": 3, "variables_skipped": 1}
    assert {r["code"] for r in report["tasks"]["skipped"]} == {
        "ql_repo", "mode_conc", "subscription"}
    names = sorted(t["name"] for t in cli.json("task", "list"))
    assert names == sorted(r["name"] for r in report["tasks"]["imported"])
    assert "multi.2" in names and "dup-8" in names

    again = cli.json("import-qinglong", str(install.db))
    assert again["summary"]["tasks_imported"] == 0
    assert {r["code"] for r in again["tasks"]["skipped"]} >= {"already_imported"}
    assert sorted(t["name"] for t in cli.json("task", "list")) == names

    text = cli.run("import-qinglong", str(install.db), "--dry-run").stdout
    assert "would import 0 task(s)" in text and "dry run: nothing changed" in text
    assert "imported before as task" in text

    assert install.digest() == digest
    assert install.db_dir_listing() == listing
    _no_secrets(cli)


def test_secrets_never_appear_in_any_output(tmp_path: Path, cli: Ql3Cli) -> None:
    install = build_install(tmp_path / "ql", "2.17")
    cli.run("import-qinglong", str(install.db))  # the text report
    cli.json("import-qinglong", str(install.db))
    assert all(t["env"] == {} for t in cli.json("task", "list"))
    for name in ("京东签到", "hooks", "multi.2"):
        assert cli.json("task", "show", name)["env"] == {}
    cli.run("task", "show", "京东签到")
    views = cli.json("vars", "list")
    assert [(v["name"], v["value"], v["source"]) for v in views] == [
        ("JD_COOKIE", "********", "qinglong2"), ("PLAIN", "********", "qinglong2"),
        ("TOKEN", "********", "qinglong2")]
    plain = cli.run("vars", "list").stdout
    assert "JD_COOKIE=********" in plain and "PLAIN=********" in plain
    # Error paths print one line, and no value either.
    missing = cli.run("task", "show", "nope", check=False)
    assert missing.returncode == 2  # an unknown name is a usage error (issue 12 item 10)
    assert missing.stderr.count("\n") == 1
    not_legacy = tmp_path / "plain.sqlite"
    not_legacy.write_bytes(b"")
    bad = cli.run("import-qinglong", str(not_legacy), check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "not a Qinglong 2.x database" in bad.stderr
    gone = cli.run("import-qinglong", str(tmp_path / "absent.sqlite"), check=False)
    assert gone.returncode == 2
    _no_secrets(cli)


def test_a_task_receives_the_global_variables(tmp_path: Path, cli: Ql3Cli) -> None:
    script = (
        'if [ "$JD_COOKIE" = "secret-two&secret-one" ]; then echo GLOBAL_OK; '
        "else echo GLOBAL_MISSING; fi\n"
        'echo "plain-len=${#PLAIN}"\n'
    )
    install = build_install(
        tmp_path / "ql", "2.17",
        crons=[{"id": 1, "name": "envcheck", "command": "task envcheck.sh",
                "schedule": "@once"}],
        scripts={"envcheck.sh": script},
    )
    cli.json("import-qinglong", str(install.db))
    run = cli.json("run", "envcheck", "--wait")
    assert run["status"] == "succeeded"
    log = cli.run("logs", run["id"]).stdout
    assert "GLOBAL_OK" in log
    assert f"plain-len={len('plain-secret')}" in log
    inspect = cli.json("inspect", run["id"])
    assert all(s not in json.dumps(inspect) for s in SECRETS)
    _no_secrets(cli)


def test_import_through_a_running_serve(tmp_path: Path, cli: Ql3Cli) -> None:
    install = build_install(
        tmp_path / "ql", "2.17",
        crons=[{"id": 1, "name": "later", "command": "task later.js", "schedule": "@once"}],
        scripts={"later.js": ""},
    )
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        serve = subprocess.Popen([QL3, "local", "serve"], env=cli.env, stdout=log,
                                 stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "ql3-data" / "ql3.sock").exists():
            assert serve.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        while cli.run("recovery", "status", check=False).returncode != 0:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        report = cli.json("import-qinglong", str(install.db))
        assert [t["name"] for t in report["tasks"]["imported"]] == ["later"]
        assert [v["name"] for v in cli.json("vars", "list")] == ["JD_COOKIE", "PLAIN", "TOKEN"]
        bad_zone = cli.run("import-qinglong", str(install.db), "--timezone", "Mars/Base",
                           check=False)
        assert bad_zone.returncode == 2 and "timezone" in bad_zone.stderr
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(30)
    assert serve.returncode == 0
    cli.outputs.append(log_path.read_text())
    _no_secrets(cli)


def test_the_import_keeps_chinese_names_says_its_zone_and_fits_80_columns(
    tmp_path: Path, cli: Ql3Cli,
) -> None:
    """A 2.x name that is a valid name stays the task's name (京东签到); a collision gets a
    numeric suffix and the summary says it was renamed; the summary names the zone the
    schedules are read in; every line fits 80 screen columns."""
    from qinglong.shared.display import text_width

    cli.env["COLUMNS"] = "80"
    cli.run("task", "add", "dup", "--schedule", "@once", "--", "true")  # taken before
    install = build_install(tmp_path / "ql", "2.21")
    text = cli.run("import-qinglong", str(install.db)).stdout
    lines = text.splitlines()
    assert all(text_width(line) <= 80 for line in lines), lines
    assert "schedules read in Asia/Shanghai (Qinglong's default; --timezone to change)" in lines
    assert any(" 京东签到 '0 5 8 * * *'" in line for line in lines), lines
    renamed = [line for line in lines if " dup-7 " in line]
    assert renamed and "renamed from dup" in renamed[0], lines
    shown = cli.run("task", "show", "京东签到").stdout
    assert "timezone: Asia/Shanghai" in shown
    other = cli.run("import-qinglong", str(install.db), "--timezone", "Europe/Berlin",
                    "--dry-run").stdout
    assert "schedules read in Europe/Berlin" in other


def test_the_push_variables_of_config_sh_reach_the_scripts(tmp_path: Path, cli: Ql3Cli) -> None:
    """The scripts' own sendNotify pushes keep working: ``export BARK_PUSH=...`` and friends
    in 2.x's ``config/config.sh`` become global variables (an Envs row of the same name wins;
    other settings, empty values and substitutions are left out)."""
    # imported as secrets, so masked in the log (docs/operations.md §9): the script also
    # prints them upper-cased, which shows what it received
    script = 'echo "bark=[$BARK_PUSH] tg=[$TG_BOT_TOKEN] pp=[$PUSH_PLUS_TOKEN] ' \
             'delay=[$RandomDelay] user=[$TG_USER_ID]"\n' \
             'echo "$BARK_PUSH $TG_BOT_TOKEN $PUSH_PLUS_TOKEN" | tr a-z A-Z\n'
    install = build_install(
        tmp_path / "ql", "2.17",
        crons=[{"id": 1, "name": "pushcheck", "command": "task pushcheck.sh",
                "schedule": "@once"}],
        scripts={"pushcheck.sh": script},
    )
    config = install.root / "data" / "config" / "config.sh"
    config.parent.mkdir(parents=True)
    config.write_text(
        '## 通知\nexport BARK_PUSH="https://api.day.app/bark-secret-key"\n'
        "export TG_BOT_TOKEN='123456:tg-secret-token'  # 机器人\n"
        'export TG_USER_ID=""\nRandomDelay="300"\n'
        'export PUSH_PLUS_TOKEN="$(cat /etc/token)"\nexport PUSH_PLUS_TOKEN="pp-from-config"\n')
    report = cli.json("import-qinglong", str(install.db))
    names = {v["name"] for v in report["variables"]["imported"]}
    assert {"BARK_PUSH", "TG_BOT_TOKEN", "PUSH_PLUS_TOKEN"} <= names
    assert "RandomDelay" not in names and "TG_USER_ID" not in names
    run = cli.json("run", "pushcheck", "--wait")
    log = cli.run("logs", run["id"]).stdout
    assert "bark=[***] tg=[***] pp=[***] delay=[] user=[]" in log
    assert "HTTPS://API.DAY.APP/BARK-SECRET-KEY 123456:TG-SECRET-TOKEN PP-FROM-CONFIG" in log
    shown = cli.run("vars", "list").stdout + json.dumps(report)
    assert "bark-secret-key" not in shown and "tg-secret-token" not in shown
