"""Bad input gets one clear error line, a non-zero exit and changes nothing (issue 2)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness import Ql3

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--schedule", "61 * * * *"], "schedule"),
        (["--schedule", "* * *"], "schedule"),
        (["--schedule", "* * * * *", "--timezone", "Mars/Olympus"], "timezone"),
        (["--schedule", "* * * * *", "--env", "QL3_RECEIPT_X=1"], "reserved"),
        (["--schedule", "* * * * *", "--env", "QL3_LAUNCH_GATE_FD=1"], "reserved"),
        (["--schedule", "* * * * *", "--env", "1BAD=1"], "env"),
        (["--schedule", "* * * * *", "--cwd", "relative/dir"], "absolute"),
        (["--schedule", "* * * * *", "--cwd", "/definitely/not/here"], "existing"),
        (["--schedule", "* * * * *", "--timeout", "-1"], "timeout"),
        (["--schedule", "* * * * *", "--timeout", "0"], "timeout"),
        (["--schedule", "* * * * *", "--max-attempts", "0"], "max_attempts"),
        (["--schedule", "* * * * *", "--timezone", ""], "timezone"),
    ],
)
def test_task_add_rejects_bad_input_and_stores_nothing(
    ql3: Ql3, args: list[str], needle: str
) -> None:
    result = ql3.run("local", "task", "add", "bad", *args, "--", "true", check=False)
    assert result.returncode == 2, result.stderr  # bad input is a usage error
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ql3: error:")
    assert needle in lines[0]
    assert ql3.json("local", "task", "list") == []


HUGE = ["echo", "x" * 100_000, "y" * 100_000, "z" * 100_000]  # each under MAX_ARG_STRLEN


@pytest.mark.parametrize("argv", [[" "], [""], HUGE])
def test_a_command_that_could_never_start_is_refused_at_add(ql3: Ql3, argv: list[str]) -> None:
    result = ql3.run("local", "task", "add", "never", "--schedule", "@once", "--", *argv,
                     check=False)
    assert result.returncode == 2, result.stderr
    assert "argv" in result.stderr
    assert ql3.json("local", "task", "list") == []


def test_empty_argv_is_a_usage_error(ql3: Ql3) -> None:
    result = ql3.run("local", "task", "add", "bad", "--schedule", "@once", check=False)
    assert result.returncode == 2
    assert ql3.json("local", "task", "list") == []


def test_nul_in_argv_or_env_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    # A NUL cannot cross exec(), so this drives the same service the CLI and socket use.
    from qinglong.local.app.service import LocalService
    from qinglong.local.storage.migrations import open_database
    from qinglong.local.storage.repository import LocalRunRepository
    from qinglong.shared.errors import ValidationError

    db = open_database(str(tmp_path / "x.db"))
    service = LocalService(LocalRunRepository(db), supervised=False)
    base = {"name": "n", "schedule": "@once"}
    with pytest.raises(ValidationError, match="argv"):
        service.task_add({**base, "argv": ["echo", "a\x00b"]})
    with pytest.raises(ValidationError, match="env"):
        service.task_add({**base, "argv": ["true"], "env": {"A": "x\x00y"}})
    with pytest.raises(ValidationError, match="argv"):
        service.task_add({**base, "argv": []})
    assert service.task_list() == []
    db.close()


def test_duplicate_task_name_is_refused_and_the_first_is_kept(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "dup", "--schedule", "@once", "--", "echo", "first")
    again = ql3.run("local", "task", "add", "dup", "--schedule", "@once", "--", "echo", "two",
                    check=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    [task] = ql3.json("local", "task", "list")
    assert task["argv"] == ["echo", "first"]


def test_commands_on_an_uninitialised_directory_say_so(tmp_path: Path) -> None:
    runner = Ql3(tmp_path / "nothing-here")
    result = runner.run("local", "task", "list", check=False)
    assert result.returncode == 1
    assert "ql3 local init" in result.stderr


def test_a_database_from_a_newer_schema_refuses_every_command(ql3: Ql3) -> None:
    conn = sqlite3.connect(ql3.data_dir / "ql3.db")
    conn.execute("INSERT INTO schema_migrations VALUES (999, '0999-future.sql', 'x', 0)")
    conn.commit()
    conn.close()
    result = ql3.run("local", "task", "list", check=False)
    assert result.returncode == 1
    assert "newer than this code" in result.stderr
    served = ql3.run("local", "serve", check=False, timeout=20)
    assert served.returncode == 1 and "newer" in served.stderr


def test_a_socket_peer_of_another_user_is_refused(ql3: Ql3) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to act as another user")
    serve = ql3.start_serve()
    public = Path(tempfile.mkdtemp(prefix="ql3-peer-"))
    try:
        sock = ql3.data_dir / "ql3.sock"
        assert (sock.stat().st_mode & 0o777) == 0o600
        # The data directory is private (0700); give the other user a hard link to the same
        # socket inode in a public directory and open the socket's own mode, so only the
        # server's SO_PEERCRED check stands in the way.
        os.chmod(public, 0o755)
        link = public / "ql3.sock"
        os.link(sock, link)
        os.chmod(sock, 0o666)
        code = (
            "import os, socket\n"
            "os.setgid(65534); os.setuid(65534)\n"
            f"s = socket.socket(socket.AF_UNIX); s.connect({str(link)!r})\n"
            "try:\n"
            "    s.sendall(b'{\"op\": \"task_list\"}\\n')\n"
            "except BrokenPipeError:\n"
            "    pass  # the server may refuse before reading\n"
            "print(s.makefile().readline())\n"
        )
        reply = subprocess.run(["/usr/bin/python3", "-I", "-c", code], capture_output=True,
                               text=True, timeout=20, check=False)
    finally:
        shutil.rmtree(public, ignore_errors=True)
        assert ql3.stop_serve(serve) == 0
    assert reply.returncode == 0, reply.stderr
    assert '"forbidden"' in reply.stdout


def test_bad_input_through_a_running_serve_also_exits_2_with_one_line(ql3: Ql3) -> None:
    serve = ql3.start_serve()
    try:
        result = ql3.run("local", "task", "add", "bad", "--schedule", "61 * * * *", "--",
                         "true", check=False)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "schedule" in result.stderr
