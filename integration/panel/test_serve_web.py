"""`ql3 local serve --web` (docs/panel.md "Running it"): the panel as serve's child process,
through the real `ql3` binary: the link on serve's stdout, a restart when the child dies,
SIGTERM then SIGKILL at serve's shutdown, and the refusals."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration

LINK = re.compile(r"(http://127\.0\.0\.1:\d+)/signin\?token=([A-Za-z0-9_-]+)")


@dataclass
class Serve:
    proc: subprocess.Popen[str]
    err: Path

    def next_link(self, timeout: float = 60) -> str:
        """The next sign-in link serve prints on stdout."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                seen += line
                match = LINK.search(line)
                if match:
                    return match.group(0)
            if self.proc.poll() is not None:
                break
        raise AssertionError(f"no sign-in link: {seen!r}; stderr: {self.err.read_text()}")

    def children(self) -> list[int]:
        """serve's child processes (each thread's: the supervisor thread spawns restarts)."""
        found: list[int] = []
        for path in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                found += [int(p) for p in path.read_text().split()]
        return found

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()


def _serve_web(ql3: Ql3, tmp_path: Path, *extra: str) -> Serve:
    err = tmp_path / "serve-stderr.txt"
    with open(err, "w") as fh:
        proc = subprocess.Popen([QL3, "local", "serve", "--web", "--listen", "127.0.0.1:0",
                                 *extra], env=ql3.env, stdout=subprocess.PIPE, stderr=fh,
                                text=True)
    return Serve(proc, err)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")  # a zombie is gone too
    except OSError:
        return True


def _signed_in_page(link: str) -> httpx.Response:
    base = link.split("/signin", 1)[0]
    with httpx.Client(base_url=base, timeout=30) as http:
        http.get(link)
        return http.get("/")


def test_serve_web_prints_the_link_and_stops_the_panel_with_it(
        ql3: Ql3, tmp_path: Path) -> None:
    ql3.run("local", "task", "add", "京东签到", "--schedule", "0 8 * * *", "--", "true")
    serve = _serve_web(ql3, tmp_path)
    try:
        link = serve.next_link()
        page = _signed_in_page(link)
        assert page.status_code == 200 and "京东签到" in page.text  # the owner answers
        (child,) = serve.children()
    finally:
        assert serve.stop() == 0
    assert _gone(child)
    assert "ql3 serving" in serve.err.read_text()


def test_a_dead_panel_is_restarted_with_a_new_link(ql3: Ql3, tmp_path: Path) -> None:
    serve = _serve_web(ql3, tmp_path)
    try:
        first = serve.next_link()
        (child,) = serve.children()
        os.kill(child, signal.SIGKILL)
        second = serve.next_link()
        assert second != first
        assert "the web panel exited with status -9; restarting it in 1 s" in \
            serve.err.read_text()
        assert _signed_in_page(second).status_code == 200
        (again,) = serve.children()
        assert again != child
    finally:
        assert serve.stop() == 0
    assert _gone(again)


def test_a_panel_that_does_not_stop_on_sigterm_is_killed_after_the_grace(
        ql3: Ql3, tmp_path: Path) -> None:
    serve = _serve_web(ql3, tmp_path)
    try:
        serve.next_link()
        (child,) = serve.children()
        os.kill(child, signal.SIGSTOP)  # SIGTERM stays pending: only SIGKILL ends it
    finally:
        assert serve.stop() == 0
    assert _gone(child)


def test_a_killed_serve_takes_its_panel_along(ql3: Ql3, tmp_path: Path) -> None:
    serve = _serve_web(ql3, tmp_path)
    try:
        serve.next_link()
        (child,) = serve.children()
        serve.proc.kill()  # no shutdown: the child notices its parent is gone
        serve.proc.wait()
        assert wait_for(lambda: _gone(child), 30)
    finally:
        serve.stop()


def test_a_refused_listen_address_stops_serve_with_the_panels_status(
        ql3: Ql3, tmp_path: Path) -> None:
    proc = subprocess.run([QL3, "local", "serve", "--web", "--listen", "0.0.0.0:0"],
                          env=ql3.env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert "needs a password" in proc.stderr
    assert "the web panel did not start (status 2)" in proc.stderr
    assert not (ql3.data_dir / "ql3.sock").exists()  # the owner stopped too


def test_listen_without_web_is_a_usage_error(ql3: Ql3) -> None:
    proc = ql3.run("local", "serve", "--listen", "127.0.0.1:0", check=False)
    assert proc.returncode == 2
    assert "--listen and --trusted-proxy need --web" in proc.stderr


def test_serve_web_without_the_extra_exits_2_naming_it(ql3: Ql3) -> None:
    code = ("import sys; sys.modules['qinglong.panel'] = None\n"
            "from qinglong.local.app.cli import entry; entry()")
    proc = subprocess.run([sys.executable, "-c", code, "local", "serve", "--web"],
                          env=ql3.env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "ql3: error: the web panel is not installed: pip install 'qinglong[web]'")
    assert not (ql3.data_dir / "ql3.sock").exists()  # nothing started


def test_serve_passes_trusted_proxy_on_to_the_panel(ql3: Ql3, tmp_path: Path) -> None:
    serve = _serve_web(ql3, tmp_path, "--trusted-proxy", "127.0.0.1")
    try:
        link = serve.next_link()
        with httpx.Client(timeout=30) as http:
            signed = http.get(link, headers={"X-Forwarded-Proto": "https"},
                              follow_redirects=False)
        assert signed.status_code == 303 and "Secure" in signed.headers["set-cookie"]
    finally:
        assert serve.stop() == 0


def test_a_second_panel_on_the_same_data_directory_is_refused_and_new_link_still_works(
        ql3: Ql3, tmp_path: Path) -> None:
    """docs/panel.md "Running it": one panel per data directory; the refused second one
    leaves the running panel's record alone, so `--new-link` still reaches it."""
    ql3.run("local", "task", "add", "京东签到", "--schedule", "0 8 * * *", "--", "true")
    serve = _serve_web(ql3, tmp_path)
    try:
        base = serve.next_link().split("/signin", 1)[0]
        second = subprocess.Popen([QL3, "local", "web", "--listen", "127.0.0.1:0"],
                                  env=ql3.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            status = second.wait(30)
        except subprocess.TimeoutExpired:  # it serves: let it exit as a user would
            second.send_signal(signal.SIGTERM)
            status = second.wait(30)
        out, err = second.communicate()
        assert status == 2, (status, out, err)
        assert "signin?token=" not in out
        assert err.startswith("ql3: error: a panel already runs on this data directory")
        assert f"at {base};" in err and "ql3 local web --new-link" in err
        assert len(err.rstrip("\n").split("\n")) == 1
        made = ql3.run("local", "web", "--new-link", check=False)
        assert made.returncode == 0, made.stderr
        link = LINK.search(made.stdout)
        assert link is not None and link.group(1) == base
        page = _signed_in_page(link.group(0))
        assert page.status_code == 200 and "京东签到" in page.text
    finally:
        assert serve.stop() == 0
