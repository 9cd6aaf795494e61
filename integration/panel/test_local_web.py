"""`ql3 local web` over real processes and real HTTP (docs/panel.md): a client of the owner
over the socket, never of the database; the one-time link; CSRF; the live log stream."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from panel_harness import start_web

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration

EVIL = "<script>alert(1)</script>"


def _open_files(pid: int) -> set[str]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def _csrf(page: str) -> str:
    return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_without_an_owner_every_page_says_start_serve(ql3: Ql3) -> None:
    web = start_web(ql3)
    try:
        with httpx.Client(base_url=web.base) as http:
            assert http.get("/").status_code == 401  # not signed in
            http.get(web.link)
            page = http.get("/")
            assert page.status_code == 503
            assert "ql3 local serve" in page.text and "调度进程未运行" in page.text
            assert http.get(web.link).status_code == 403  # the link worked once
        assert not any(p.endswith(("ql3.db", "ql3.lock")) for p in _open_files(web.proc.pid))
    finally:
        assert web.stop() == 0


def test_tasks_run_and_live_log_through_the_real_owner(ql3: Ql3, tmp_path: Path) -> None:
    # task names are ASCII until Chinese names land; labels and output are Chinese
    ql3.run("local", "task", "add", "jd-sign", "--schedule", "0 8 * * *",
            "--timezone", "Asia/Shanghai", "--label", "京东签到", "--",
            "sh", "-c", f"echo 开始签到; echo '{EVIL}'; sleep 1; echo 签到完成")
    ql3.run("local", "task", "add", "other", "--schedule", "0 9 * * *", "--", "true")
    serve = ql3.start_serve()
    web = start_web(ql3)
    try:
        with httpx.Client(base_url=web.base, timeout=30) as http:
            http.get(web.link)
            page = http.get("/")
            assert page.status_code == 200, page.text
            assert "京东签到" in page.text and "Asia/Shanghai" in page.text
            assert "jd-sign" in page.text
            assert page.headers["content-security-policy"].startswith("default-src 'self'")
            found = http.get("/", params={"q": "京东"}).text
            assert "jd-sign" in found and ">other<" not in found
            assert ">other<" in page.text
            csrf = _csrf(page.text)
            path = "/tasks/jd-sign/run"
            refused = http.post(path, follow_redirects=False)
            assert refused.status_code == 403
            assert ql3.json("local", "runs") == []  # nothing ran
            started = http.post(path, data={"csrf": csrf}, headers={"Origin": web.base},
                                follow_redirects=False)
            assert started.status_code == 303, started.text
            run_path = started.headers["location"]
            off = http.post("/tasks/other/disable", data={"csrf": csrf},
                            headers={"Origin": web.base}, follow_redirects=False)
            assert off.status_code == 303
            assert ql3.json("local", "task", "show", "other")["enabled"] is False
            assert "已禁用" in http.get("/", params={"q": "other"}).text
            http.post("/tasks/other/enable", headers={"Origin": web.base,
                                                      "X-CSRF-Token": csrf})
            assert ql3.json("local", "task", "show", "other")["enabled"] is True
            detail = http.get(run_path)
            assert detail.status_code == 200 and "jd-sign" in detail.text
            events: list[str] = []
            with http.stream("GET", f"{run_path}/log/stream") as stream:
                for line in stream.iter_lines():
                    events.append(line)
                    if line.startswith("event: end"):
                        break
            text = "".join(json.loads(e[6:]) for e in events
                           if e.startswith("data: \""))
            assert "开始签到" in text and EVIL in text and "签到完成" in text
            ids = [e[4:] for e in events if e.startswith("id: ")]  # ATTEMPT:OFFSET
            offsets = [int(i.removeprefix("1:")) for i in ids]
            assert offsets == sorted(offsets) and offsets[-1] == len(text.encode())
            # resume: nothing after the last id but the end
            again = http.get(f"{run_path}/log/stream", headers={"Last-Event-ID": ids[-1]})
            assert "开始签到" not in again.text and "event: end" in again.text
        assert not any(p.endswith(("ql3.db", "ql3.lock")) for p in _open_files(web.proc.pid))
    finally:
        assert web.stop() == 0
        ql3.stop_serve(serve)


def test_socket_ops_page_tasks_and_long_poll_the_log(ql3: Ql3) -> None:
    from qinglong.local.app.client import RemoteValidationError, SocketBackend

    for i in range(5):
        ql3.run("local", "task", "add", f"task-{i}", "--schedule", "0 8 * * *",
                "--label", "批" if i % 2 else "单", "--", "true")
    ql3.run("local", "task", "add", "slow", "--schedule", "0 8 * * *", "--",
            "sh", "-c", "sleep 1; echo 完成")
    serve = ql3.start_serve()
    try:
        sock = SocketBackend(str(ql3.data_dir / "ql3.sock"))
        page = sock.call("task_page", offset=1, limit=2, query="")
        assert page["total"] == 6 and len(page["tasks"]) == 2
        assert sock.call("task_page", offset=0, limit=50, query="批")["total"] == 2
        assert [t["name"] for t in sock.call("task_page", offset=0, limit=200,
                                             query="TASK-")["tasks"]] == [
            f"task-{i}" for i in range(5)]  # by name, case-insensitive
        for bad in ({"limit": 0}, {"limit": 201}, {"offset": -1}):
            with pytest.raises(RemoteValidationError):
                sock.call("task_page", **bad)
        run = sock.call("run_now", name="slow")
        chunk = sock.call("logs_wait", run_id=run["id"], offset=0, timeout_s=20)
        assert "完成" in chunk["data"] and chunk["offset"] == len(chunk["data"].encode())
        end = sock.call("logs_wait", run_id=run["id"], offset=chunk["offset"], timeout_s=20)
        assert end["data"] == "" and wait_for(
            lambda: sock.call("logs_wait", run_id=run["id"], offset=chunk["offset"],
                              timeout_s=5)["done"], 20)
        # a page's rows carry their views whole: last run, labels, next fire
        slow = sock.call("task_page", offset=0, limit=1, query="SLOW")
        assert slow["total"] == 1 and slow["tasks"][0]["last_run"]["id"] == run["id"]
        by_name = sock.call("task_page", offset=4, limit=2, query="")["tasks"]
        assert [t["name"] for t in by_name] == ["task-3", "task-4"]
        assert [t["labels"] for t in by_name] == [["批"], ["单"]]
        assert [t["last_run"] for t in by_name] == [None, None]
        assert sock.call("task_page", offset=9, limit=5, query="") == {
            "tasks": [], "total": 6, "offset": 9, "limit": 5}
    finally:
        ql3.stop_serve(serve)


def test_without_the_extra_web_exits_2_naming_it(ql3: Ql3) -> None:
    code = ("import sys; sys.modules['qinglong.panel'] = None\n"
            "from qinglong.local.app.cli import entry; entry()")
    proc = subprocess.run([sys.executable, "-c", code, "local", "web"], env=ql3.env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "pip install 'qinglong[web]'" in proc.stderr
    assert Path(QL3).exists()


def test_twenty_open_log_views_hold_neither_the_panel_nor_the_owner(ql3: Ql3) -> None:
    """Each log view waits with `logs_wait` on its own socket connection thread: with twenty
    streams open on a quiet run, pages and `ql3 local` commands still answer."""
    import threading

    ql3.run("local", "task", "add", "quiet", "--schedule", "0 8 * * *", "--",
            "sh", "-c", "echo 起; sleep 120; echo 止")
    serve = ql3.start_serve()
    web = start_web(ql3)
    stop = threading.Event()
    opened: list[int] = []
    try:
        with httpx.Client(base_url=web.base, timeout=30) as http:
            http.get(web.link)
            csrf = _csrf(http.get("/").text)
            run_path = http.post("/tasks/quiet/run", data={"csrf": csrf},
                                 headers={"Origin": web.base},
                                 follow_redirects=False).headers["location"]

            cookies = dict(http.cookies)

            def view() -> None:  # a browser tab: its own connection
                try:
                    with httpx.Client(base_url=web.base, cookies=cookies, timeout=60) as own, \
                            own.stream("GET", f"{run_path}/log/stream") as stream:
                        for line in stream.iter_lines():
                            if line.startswith("id: "):
                                opened.append(1)
                            if stop.is_set():
                                return
                except httpx.HTTPError:
                    if not stop.is_set():
                        raise

            threads = [threading.Thread(target=view, daemon=True) for _ in range(20)]
            for thread in threads:
                thread.start()
            # all streaming (generous: the machine is shared; no timing is asserted)
            assert wait_for(lambda: len(opened) >= 20, 90), len(opened)
            page = http.get("/", timeout=10)
            assert page.status_code == 200 and "quiet" in page.text
            listed = ql3.run("local", "task", "list", timeout=10)
            assert "quiet" in listed.stdout
            stop.set()
            ql3.run("local", "cancel", run_path.rsplit("/", 1)[1], check=False)  # cleanup
            for thread in threads:
                thread.join(30)
    finally:
        stop.set()
        assert web.stop() == 0
        ql3.stop_serve(serve)


@pytest.mark.parametrize("trusted", [None, "127.0.0.1", "10.0.0.0/8,127.0.0.0/8"])
def test_forwarded_proto_counts_only_from_a_trusted_proxy(ql3: Ql3, trusted: str | None) -> None:
    """`--trusted-proxy` (docs/panel.md "Behind a reverse proxy"): the cookie is Secure when
    a trusted peer says https; from a peer not listed (none by default) the header is
    ignored, and an https Origin does not match the plain-http request."""
    web = start_web(ql3, *(["--trusted-proxy", trusted] if trusted else []))
    try:
        with httpx.Client(base_url=web.base, timeout=30) as http:
            signed = http.get(web.link, headers={"X-Forwarded-Proto": "https"},
                              follow_redirects=False)
            assert signed.status_code == 303
            assert ("Secure" in signed.headers["set-cookie"]) == (trusted is not None)
            csrf = _csrf(http.get("/").text)
            https_origin = "https://" + web.base.split("://", 1)[1]
            lang = http.post("/lang", data={"lang": "en", "csrf": csrf},
                             headers={"Origin": https_origin, "X-Forwarded-Proto": "https"},
                             follow_redirects=False)
            assert lang.status_code == (303 if trusted else 403)
    finally:
        assert web.stop() == 0


def test_a_bad_trusted_proxy_exits_2_naming_it(ql3: Ql3) -> None:
    out = ql3.run("local", "web", "--listen", "127.0.0.1:0", "--trusted-proxy",
                  "127.0.0.1,proxy.example", check=False)
    assert out.returncode == 2
    assert out.stderr == ("ql3: error: --trusted-proxy: 'proxy.example' is not an IP address "
                          "or a network (ADDR or ADDR/PREFIX)\n")
