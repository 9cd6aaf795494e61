"""The panel's task form, bulk actions and Runs page over a real `ql3 local serve` and a real
`ql3 local web` (docs/panel.md "Pages"), and the socket ops behind them (`runs_page`,
`schedule_preview`, docs/protocols.md §3.8)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from panel_harness import Web, start_web

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration


@dataclass
class Signed:
    ql3: Ql3
    web: Web
    http: httpx.Client
    csrf: str

    def post(self, path: str, data: dict[str, object]) -> httpx.Response:
        return self.http.post(path, data={"csrf": self.csrf, **data},
                              headers={"Origin": self.web.base}, follow_redirects=False)


@pytest.fixture
def signed(ql3: Ql3) -> Iterator[Signed]:
    serve = ql3.start_serve()
    web = start_web(ql3)
    try:
        with httpx.Client(base_url=web.base, timeout=30) as http:
            http.get(web.link)
            page = http.get("/").text
            csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            yield Signed(ql3, web, http, csrf)
    finally:
        assert web.stop() == 0
        ql3.stop_serve(serve)


FORM = {"name": "京东签到", "schedule": "30 0 8 * * *", "timezone": "Asia/Shanghai",
        "command": "echo 签到成功", "timeout": "60", "attempts": "2",
        "concurrency": "forbid", "labels": "京东, 每日", "env": "JD_ACCOUNT=张三\n",
        "secret_env": "JD_COOKIE=pt_key=秘密值"}


def test_the_form_creates_a_chinese_task_with_a_write_only_secret(signed: Signed) -> None:
    made = signed.post("/tasks/new", FORM)
    assert made.status_code == 303, made.text
    task = signed.ql3.json("local", "task", "show", "京东签到")
    assert task["argv"] == ["echo", "签到成功"] and task["schedule"] == "30 0 8 * * *"
    assert task["timezone"] == "Asia/Shanghai" and task["timeout_s"] == 60
    assert task["max_attempts"] == 2 and task["labels"] == ["京东", "每日"]
    assert task["env"] == {"JD_ACCOUNT": "张三"}
    assert task["secret_env"] == {"JD_COOKIE": "********"}
    form = signed.http.get("/tasks/京东签到/edit").text
    assert "JD_COOKIE" in form and "秘密值" not in form  # write-only
    assert "JD_ACCOUNT=张三" in form and "签到成功" in form
    # the next fire times, in the task's zone: 08:00:30 Shanghai
    assert form.count(" 08:00:30</time>") == 5
    # an edit keeps the secret unless it is ticked for removal
    edited = signed.post("/tasks/京东签到/edit", {**FORM, "secret_env": "",
                                                 "command": "sh -c 'echo 改了'"})
    assert edited.status_code == 303, edited.text
    task = signed.ql3.json("local", "task", "show", "京东签到")
    assert task["argv"] == ["sh", "-c", "echo 改了"]
    assert task["secret_env"] == {"JD_COOKIE": "********"}
    signed.post("/tasks/京东签到/edit", {**FORM, "secret_env": "",
                                        "secret_unset": "JD_COOKIE"})
    assert signed.ql3.json("local", "task", "show", "京东签到")["secret_env"] == {}
    copy = signed.http.get("/tasks/new", params={"copy": "京东签到"}).text
    assert "签到成功" in copy and 'value="京东签到"' not in copy


def test_refusals_are_shown_beside_their_fields_and_nothing_is_stored(signed: Signed) -> None:
    bad = signed.post("/tasks/new", {**FORM, "name": "坏/名字", "secret_env": ""})
    assert bad.status_code == 400
    assert 'id="name-error"' in bad.text and 'aria-invalid="true"' in bad.text
    assert "坏/名字" in bad.text  # the input comes back, escaped, for correction
    # the owner's rules in the viewer's language (zh-CN here), not its English words
    assert "请用 1-128 个字符" in bad.text and "use 1-128 characters" not in bad.text
    cron = signed.post("/tasks/new", {**FORM, "schedule": "61 * * * *"})
    assert cron.status_code == 400 and 'id="schedule-error"' in cron.text
    assert "“分”一段无效" in cron.text and "is invalid" not in cron.text
    assert "秘密值" not in cron.text  # a secret is never sent back, even on a refusal
    zone = signed.post("/tasks/new", {**FORM, "timezone": "Mars/Olympus"})
    assert zone.status_code == 400 and 'id="timezone-error"' in zone.text
    assert "不是 IANA 时区名" in zone.text
    quote = signed.post("/tasks/new", {**FORM, "command": "echo 'open"})
    assert quote.status_code == 400 and "未闭合的引号" in quote.text
    assert signed.ql3.json("local", "task", "list") == []
    signed.post("/tasks/new", FORM)
    twice = signed.post("/tasks/new", FORM)
    assert twice.status_code == 409 and 'role="alert"' in twice.text
    assert "已有同名任务" in twice.text and "already exists" not in twice.text
    no_csrf = signed.http.post("/tasks/new", data=FORM, headers={"Origin": signed.web.base})
    assert no_csrf.status_code == 403


def test_the_preview_follows_the_schedule_and_zone_as_typed(signed: Signed) -> None:
    part = signed.http.get("/tasks/preview", params={"schedule": "0 0 9 * * *",
                                                     "timezone": "America/New_York"},
                           headers={"HX-Request": "true"})
    assert part.status_code == 200 and "<html" not in part.text
    assert part.text.count(" 09:00:00</time>") == 5 and "America/New_York" in part.text
    bad = signed.http.get("/tasks/preview", params={"schedule": "* * *", "timezone": "UTC"})
    assert "field-error" in bad.text and "<time>" not in bad.text
    assert "不是有效的 cron 表达式" in bad.text


def test_bulk_disable_run_and_delete_with_a_confirmation(signed: Signed) -> None:
    for name in ("甲", "乙", "丙", "丁"):
        signed.ql3.run("local", "task", "add", name, "--schedule", "0 8 * * *", "--", "true")
    names = ["甲", "乙", "丙"]
    off = signed.post("/tasks/bulk", {"action": "disable", "names": names})
    assert off.status_code == 303 and "done=3" in off.headers["location"]
    enabled = {t["name"]: t["enabled"] for t in signed.ql3.json("local", "task", "list")}
    assert enabled == {"甲": False, "乙": False, "丙": False, "丁": True}
    ran = signed.post("/tasks/bulk", {"action": "run", "names": ["丁"]})
    assert ran.headers["location"].startswith("/runs?")
    ask = signed.post("/tasks/bulk", {"action": "delete", "names": ["甲", "乙"]})
    assert ask.status_code == 200 and "确定删除这 2 个任务吗" in ask.text
    assert len(signed.ql3.json("local", "task", "list")) == 4  # not before the confirmation
    gone = signed.post("/tasks/bulk", {"action": "delete", "names": ["甲", "乙"],
                                       "confirm": "yes"})
    assert gone.status_code == 303
    assert sorted(t["name"] for t in signed.ql3.json("local", "task", "list")) == ["丁", "丙"]


def test_an_empty_variable_value_is_refused_by_the_page_and_by_the_owner(
        signed: Signed) -> None:
    """One rule for every client (docs/panel.md "Variables"): `vars set` refuses empty
    stdin, the owner's ``vars_set`` refuses an empty value, and so does the page, in the
    viewer's language, keeping what was typed and storing nothing."""
    from qinglong.local.app.client import RemoteValidationError, SocketBackend

    cli = subprocess.run([QL3, "local", "vars", "set", "JD_EMPTY"], input="",
                         env=signed.ql3.env, capture_output=True, text=True, timeout=60,
                         check=False)
    assert cli.returncode == 2 and "the value is empty" in cli.stderr
    page = signed.post("/vars", {"action": "add", "name": "JD_EMPTY", "value": "",
                                 "remark": "京东账号备注", "secret": "on"})
    assert page.status_code == 400, page.text
    assert "被拒绝：值为空" in page.text and "the value is empty" not in page.text
    assert 'value="JD_EMPTY"' in page.text and 'value="京东账号备注"' in page.text
    assert 'aria-invalid="true"' in page.text
    english = signed.http.post("/vars", data={
        "csrf": signed.csrf, "action": "add", "name": "JD_EMPTY", "value": ""},
        headers={"Origin": signed.web.base, "Accept-Language": "en"})
    assert english.status_code == 400 and "Refused: the value is empty" in english.text
    sock = SocketBackend(str(signed.ql3.data_dir / "ql3.sock"))
    with pytest.raises(RemoteValidationError, match=r"^value: the value is empty"):
        sock.call("vars_set", name="JD_EMPTY", value="", remark="京东账号备注")
    lines = "# 空的\nJD_EMPTY=\n# 京东\nJD_COOKIE=pt_key=值\n"
    imported = signed.post("/vars/import", {"lines": lines})
    assert imported.status_code == 303
    assert "done=1" in imported.headers["location"]
    assert "failed=1" in imported.headers["location"]
    assert [v["name"] for v in signed.ql3.json("local", "vars", "list")] == ["JD_COOKIE"]


def test_runs_page_filters_and_pages_by_keyset(signed: Signed) -> None:
    from qinglong.local.app.client import RemoteValidationError, SocketBackend

    signed.ql3.run("local", "task", "add", "多次", "--schedule", "0 8 * * *", "--", "true")
    signed.ql3.run("local", "task", "add", "别的", "--schedule", "0 8 * * *", "--", "false")
    sock = SocketBackend(str(signed.ql3.data_dir / "ql3.sock"))
    made = []
    for _ in range(5):
        run = sock.call("run_now", name="多次")
        made.append(run["id"])
        assert wait_for(lambda r=run: sock.call("run_get", run_id=r["id"])["status"]
                        == "succeeded", 30)
    other = sock.call("run_now", name="别的")["id"]
    assert wait_for(lambda: sock.call("run_get", run_id=other)["status"] == "failed", 30)
    first = sock.call("runs_page", task="多次", limit=2)
    assert [r["id"] for r in first["runs"]] == made[::-1][:2]
    second = sock.call("runs_page", task="多次", limit=2, before=first["next"])
    third = sock.call("runs_page", task="多次", limit=2, before=second["next"])
    assert [r["id"] for r in second["runs"] + third["runs"]] == made[::-1][2:]
    assert third["next"] is None
    assert [r["id"] for r in sock.call("runs_page", status="failed")["runs"]] == [other]
    assert sock.call("runs_page", task="没有这个")["runs"] == []
    for bad in ({"limit": 0}, {"limit": 201}, {"before": "not-an-id"}, {"status": "x"}):
        with pytest.raises(RemoteValidationError):
            sock.call("runs_page", **bad)
    preview = sock.call("schedule_preview", schedule="0 0 8 * * *",
                        timezone="Asia/Shanghai", count=3)
    assert [s[11:] for s in preview["slots"]] == ["00:00:00.000Z"] * 3  # 08:00 Shanghai
    with pytest.raises(RemoteValidationError, match=r"^schedule"):
        sock.call("schedule_preview", schedule="1 2 3", timezone="UTC")
    # the page: one filter, the older link carries the cursor
    page = signed.http.get("/runs", params={"task": "多次"}).text
    assert page.count('class="task-name">多次<') == 5 and "别的" not in page
    failed = signed.http.get("/runs", params={"status": "failed"}).text
    assert 'class="task-name">别的<' in failed and 'class="task-name">多次<' not in failed
    cursor_page = signed.http.get("/runs", params={"task": "多次", "before": made[2]}).text
    assert cursor_page.count('class="task-name">多次<') == 2 and "最新" in cursor_page


def test_set_password_then_a_non_loopback_listen_signs_in_with_it(ql3: Ql3) -> None:
    import re
    import select
    import signal
    import stat
    import subprocess

    from harness import QL3

    refused = ql3.run("local", "web", "--listen", "0.0.0.0:0", check=False, timeout=60)
    assert refused.returncode == 2 and "--set-password" in refused.stderr
    short = subprocess.run([QL3, "local", "web", "--set-password"], input="短\n", env=ql3.env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert short.returncode == 2 and "8-1024" in short.stderr
    done = subprocess.run([QL3, "local", "web", "--set-password"], input="青龙密码-123\n",
                          env=ql3.env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    stored = ql3.data_dir / "panel-password"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert "青龙密码" not in stored.read_text() and stored.read_text().startswith("scrypt$")
    serve = ql3.start_serve()
    proc = subprocess.Popen([QL3, "local", "web", "--listen", "0.0.0.0:0"], env=ql3.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no sign-in link"
        port = re.search(r":(\d+)/signin", proc.stdout.readline())
        assert port is not None
        base = f"http://127.0.0.1:{port.group(1)}"
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/").status_code == 401
            assert 'type="password"' in http.get("/signin").text
            wrong = http.post("/signin", data={"password": "猜的"}, headers={"Origin": base})
            assert wrong.status_code == 403 and http.get("/").status_code == 401
            ok = http.post("/signin", data={"password": "青龙密码-123"},
                           headers={"Origin": base}, follow_redirects=False)
            assert ok.status_code == 303
            assert http.get("/").status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        ql3.stop_serve(serve)


def test_overview_counts_the_last_day_and_lists_failures_and_next_runs(
        signed: Signed) -> None:
    from qinglong.local.app.client import SocketBackend

    signed.ql3.run("local", "task", "add", "会失败", "--schedule", "0 8 * * *", "--", "false")
    signed.ql3.run("local", "task", "add", "会成功", "--schedule", "0 9 * * *", "--", "true")
    sock = SocketBackend(str(signed.ql3.data_dir / "ql3.sock"))
    bad = sock.call("run_now", name="会失败")["id"]
    good = sock.call("run_now", name="会成功")["id"]
    for run, end in ((bad, "failed"), (good, "succeeded")):
        assert wait_for(lambda r=run, e=end: sock.call("run_get", run_id=r)["status"] == e, 30)
    assert wait_for(lambda: all(t["next_fire"] for t in sock.call(
        "task_page", offset=0, limit=10, query="")["tasks"]), 30)
    page = signed.http.get("/dashboard")
    assert page.status_code == 200
    facts = [p.split("</p>")[0] for p in page.text.split('class="big')[1:]]
    assert [f.rsplit(">", 1)[1] for f in facts] == ["2", "1", "2"]  # runs, failed, tasks
    assert f'/runs/{bad}"' in page.text and f'/runs/{good}"' not in page.text
    tasks = sock.call("task_page", offset=0, limit=10, query="")["tasks"]
    soonest = sorted(tasks, key=lambda t: t["next_fire"])
    upcoming = page.text.split("<ol>", 1)[1]
    at = [upcoming.index(f'"task-name">{t["name"]}<') for t in soonest]
    assert at == sorted(at)  # soonest first, whatever the time of day
