"""The maintenance scripts in ``examples/`` run against real files and have their real effects.

Each test builds the demo tree with ``make_sample_data.py`` in ``tmp_path`` and runs a script
as a separate process, the way the runtime would schedule it.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qinglong.shared.process.signals import group_exists, signal_group

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX/Linux only")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DAY = 86400
OLD_LOGS = ["app-old.log", "cron-old.log", "worker-old.log"]  # 30, 45 and 10 days old
NEW_LOGS = ["app.log", "worker.log"]


def run(
    script: str, *args: str | Path, check_rc: int | None = 0
) -> subprocess.CompletedProcess[str]:
    path = EXAMPLES / script
    argv = [sys.executable, str(path)] if script.endswith(".py") else [str(path)]
    result = subprocess.run(
        [*argv, *map(str, args)], capture_output=True, text=True, timeout=30, check=False
    )
    if check_rc is not None:
        assert result.returncode == check_rc, (result.stdout, result.stderr)
    return result


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    root = tmp_path / "sample"
    run("make_sample_data.py", root)
    return root


def snapshot(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, stat.S_IMODE(st.st_mode)


def db_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY 1').fetchall() for t in tables}
    finally:
        conn.close()


# --- every script ----------------------------------------------------------------------------

SCRIPTS = [
    "backup_sqlite.py",
    "compress_old_logs.py",
    "disk_usage.py",
    "fail.sh",
    "make_sample_data.py",
    "slow_with_child.sh",
]


def test_examples_directory_holds_the_documented_scripts() -> None:
    assert set(SCRIPTS) <= {p.name for p in EXAMPLES.iterdir() if p.is_file()}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_example_is_an_executable_script_with_a_header(script: str) -> None:
    path = EXAMPLES / script
    lines = path.read_text(encoding="utf-8").splitlines()
    expected = "#!/usr/bin/env python3" if script.endswith(".py") else "#!/bin/sh"
    assert lines[0] == expected
    assert lines[1].startswith(('"""', "#"))
    assert path.stat().st_mode & stat.S_IXUSR


@pytest.mark.parametrize(
    "script", ["backup_sqlite.py", "compress_old_logs.py", "disk_usage.py", "make_sample_data.py"]
)
def test_python_example_without_arguments_prints_usage_and_exits_2(script: str) -> None:
    result = run(script, check_rc=2)
    assert "usage:" in result.stderr


def test_python_examples_import_only_the_standard_library() -> None:
    stdlib = sys.stdlib_module_names
    for path in (EXAMPLES / name for name in SCRIPTS if name.endswith(".py")):
        for match in re.finditer(
            r"^(?:from|import)\s+([A-Za-z_]\w*)", path.read_text(), flags=re.MULTILINE
        ):
            assert match.group(1) in stdlib | {"__future__"}, (path.name, match.group(1))


# --- make_sample_data.py ------------------------------------------------------------------------


def test_make_sample_data_builds_logs_with_old_mtimes_and_a_database(sample: Path) -> None:
    logs = sample / "logs"
    now = time.time()
    ages = {p.name: (now - p.lstat().st_mtime) / DAY for p in logs.iterdir()}
    for name in NEW_LOGS:
        assert ages[name] < 1
    assert 29 < ages["app-old.log"] < 31
    assert 9 < ages["worker-old.log"] < 11
    assert 44 < ages["cron-old.log"] < 46
    assert 59 < ages["notes.txt"] < 61
    link = logs / "linked-old.log"
    assert link.is_symlink()
    assert link.resolve() == (sample / "keep" / "precious.log").resolve()
    rows = db_rows(sample / "db" / "app.sqlite")
    assert set(rows) == {"tasks", "runs"}
    assert len(rows["tasks"]) == 4
    assert len(rows["runs"]) == 40
    assert all(p.stat().st_size > 0 for p in logs.glob("*.log"))


def test_make_sample_data_refuses_to_overwrite_an_existing_tree(sample: Path) -> None:
    before = snapshot(sample / "logs" / "app.log")
    result = run("make_sample_data.py", sample, check_rc=1)
    assert "refusing" in result.stderr
    assert snapshot(sample / "logs" / "app.log") == before


# --- compress_old_logs.py -----------------------------------------------------------------------


def test_compress_gzips_only_old_logs_and_leaves_the_rest_untouched(sample: Path) -> None:
    logs = sample / "logs"
    originals = {name: snapshot(logs / name) for name in OLD_LOGS}
    untouched = {name: snapshot(logs / name) for name in [*NEW_LOGS, "notes.txt"]}
    precious = snapshot(sample / "keep" / "precious.log")
    link_before = os.lstat(logs / "linked-old.log")

    result = run("compress_old_logs.py", logs, "7")

    for name, (data, mtime_ns, mode) in originals.items():
        assert not (logs / name).exists()
        gz = logs / f"{name}.gz"
        assert gzip.decompress(gz.read_bytes()) == data
        assert gz.stat().st_mtime_ns == mtime_ns
        assert stat.S_IMODE(gz.stat().st_mode) == mode
        assert f"gzip {name}: {len(data)} -> {gz.stat().st_size} bytes" in result.stdout
    for name, before in untouched.items():
        assert snapshot(logs / name) == before
    link_after = os.lstat(logs / "linked-old.log")
    assert stat.S_ISLNK(link_after.st_mode)
    assert (link_after.st_ino, link_after.st_mtime_ns) == (
        link_before.st_ino,
        link_before.st_mtime_ns,
    )
    assert snapshot(sample / "keep" / "precious.log") == precious
    assert "skip linked-old.log: symlink" in result.stdout
    assert "total: 3 compressed" in result.stdout
    assert not list(logs.glob("*.tmp"))


def test_compressed_logs_are_readable_by_the_gzip_tool(sample: Path) -> None:
    gzip_tool = shutil.which("gzip")
    if gzip_tool is None:
        pytest.skip("no gzip command on this machine")
    logs = sample / "logs"
    original = (logs / "app-old.log").read_bytes()
    run("compress_old_logs.py", logs, "7")
    subprocess.run([gzip_tool, "-t", str(logs / "app-old.log.gz")], check=True)
    out = subprocess.run(
        [gzip_tool, "-dc", str(logs / "app-old.log.gz")], capture_output=True, check=True
    )
    assert out.stdout == original


def test_compress_threshold_is_in_days(sample: Path) -> None:
    logs = sample / "logs"
    result = run("compress_old_logs.py", logs, "20")
    assert (logs / "app-old.log.gz").exists()
    assert (logs / "cron-old.log.gz").exists()
    assert (logs / "worker-old.log").exists()  # 10 days old: younger than 20
    assert not (logs / "worker-old.log.gz").exists()
    assert "total: 2 compressed" in result.stdout


def test_compress_is_idempotent(sample: Path) -> None:
    logs = sample / "logs"
    run("compress_old_logs.py", logs, "7")
    listing = sorted(p.name for p in logs.iterdir())
    result = run("compress_old_logs.py", logs, "7")
    assert sorted(p.name for p in logs.iterdir()) == listing
    assert "total: 0 compressed" in result.stdout


def test_compress_never_overwrites_an_existing_gz(sample: Path) -> None:
    logs = sample / "logs"
    (logs / "app-old.log.gz").write_bytes(b"someone else's archive")
    original = (logs / "app-old.log").read_bytes()
    result = run("compress_old_logs.py", logs, "7")
    assert (logs / "app-old.log.gz").read_bytes() == b"someone else's archive"
    assert (logs / "app-old.log").read_bytes() == original
    assert "skip app-old.log: app-old.log.gz already exists" in result.stdout
    assert "total: 2 compressed" in result.stdout


def test_compress_replaces_a_stale_temporary_from_an_interrupted_run(sample: Path) -> None:
    logs = sample / "logs"
    (logs / "cron-old.log.gz.tmp").write_bytes(b"half-written")
    original = (logs / "cron-old.log").read_bytes()
    run("compress_old_logs.py", logs, "7")
    assert gzip.decompress((logs / "cron-old.log.gz").read_bytes()) == original
    assert not (logs / "cron-old.log.gz.tmp").exists()


def test_compress_does_not_recurse_into_subdirectories(sample: Path) -> None:
    nested = sample / "logs" / "nested"
    nested.mkdir()
    old = nested / "deep-old.log"
    old.write_text("old\n")
    os.utime(old, (time.time() - 30 * DAY,) * 2)
    run("compress_old_logs.py", sample / "logs", "7")
    assert old.exists()
    assert not (nested / "deep-old.log.gz").exists()


@pytest.mark.parametrize("days", ["-1", "soon", "nan"])
def test_compress_rejects_a_bad_days_argument(sample: Path, days: str) -> None:
    run("compress_old_logs.py", sample / "logs", days, check_rc=2)
    assert (sample / "logs" / "app-old.log").exists()


def test_compress_rejects_a_missing_directory(tmp_path: Path) -> None:
    run("compress_old_logs.py", tmp_path / "absent", "7", check_rc=2)


# --- backup_sqlite.py --------------------------------------------------------------------------


BACKUP_NAME = re.compile(r"app-\d{8}T\d{12}Z\.sqlite")


def test_backup_writes_a_verified_copy_with_the_same_rows(sample: Path, tmp_path: Path) -> None:
    src = sample / "db" / "app.sqlite"
    dest = tmp_path / "backups"
    source_listing = sorted(p.name for p in src.parent.iterdir())

    result = run("backup_sqlite.py", src, dest)

    # Nothing new next to the source (no -wal/-shm left behind, no temporary).
    assert sorted(p.name for p in src.parent.iterdir()) == source_listing
    (copy,) = dest.iterdir()
    assert BACKUP_NAME.fullmatch(copy.name)
    assert f"backup ok: {copy}" in result.stdout
    assert "integrity_check ok" in result.stdout
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        conn.close()
    assert db_rows(copy) == db_rows(src)


def test_backup_of_a_database_in_use_copies_only_committed_rows(
    sample: Path, tmp_path: Path
) -> None:
    src = sample / "db" / "app.sqlite"
    committed = db_rows(src)
    writer = sqlite3.connect(src, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO tasks VALUES (99, 'pending', '* * * * *', 'true')")
        run("backup_sqlite.py", src, tmp_path / "backups")
        writer.execute("COMMIT")
    finally:
        writer.close()
    (copy,) = (tmp_path / "backups").iterdir()
    assert db_rows(copy) == committed
    assert len(db_rows(src)["tasks"]) == len(committed["tasks"]) + 1


def test_two_backups_get_distinct_names(sample: Path, tmp_path: Path) -> None:
    src = sample / "db" / "app.sqlite"
    run("backup_sqlite.py", src, tmp_path / "backups")
    run("backup_sqlite.py", src, tmp_path / "backups")
    assert len(list((tmp_path / "backups").iterdir())) == 2


def test_backup_of_a_file_that_is_not_sqlite_fails_and_keeps_nothing(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_bytes(b"this is not a database" * 100)
    dest = tmp_path / "backups"
    result = run("backup_sqlite.py", bogus, dest, check_rc=None)
    assert result.returncode != 0
    assert "backup FAILED" in result.stderr
    assert list(dest.iterdir()) == []
    assert bogus.read_bytes() == b"this is not a database" * 100


def test_backup_of_a_missing_database_fails(tmp_path: Path) -> None:
    result = run("backup_sqlite.py", tmp_path / "absent.sqlite", tmp_path / "b", check_rc=None)
    assert result.returncode != 0
    assert not (tmp_path / "absent.sqlite").exists()


# --- disk_usage.py -----------------------------------------------------------------------------


def walk_usage(root: Path) -> dict[str, Any]:
    """The same figures, computed independently with os.walk (no symlink is followed)."""
    files: list[tuple[str, int]] = []
    top: dict[str, int] = {p.name: 0 for p in root.iterdir()}
    dirs = symlinks = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISLNK(st.st_mode):
                symlinks += 1
            elif stat.S_ISDIR(st.st_mode):
                dirs += 1
            elif stat.S_ISREG(st.st_mode):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                files.append((rel, st.st_size))
                top[rel.split(os.sep, 1)[0]] += st.st_size
    largest = sorted(files, key=lambda f: (-f[1], f[0]))[:10]
    return {
        "total_bytes": sum(size for _, size in files),
        "file_count": len(files),
        "dir_count": dirs,
        "symlink_count": symlinks,
        "largest_files": [{"path": p, "bytes": n} for p, n in largest],
        "top_level": top,
    }


def test_disk_usage_json_matches_os_walk(sample: Path) -> None:
    # More than ten files, so "the 10 largest" is a real selection.
    for i in range(8):
        (sample / "keep" / f"extra-{i}.bin").write_bytes(b"x" * (1000 * i + 1))
    (sample / "outside-link").symlink_to(sample / "keep")  # a symlinked dir: never entered
    report = json.loads(run("disk_usage.py", sample).stdout)
    expected = walk_usage(sample)
    for key, value in expected.items():
        assert report[key] == value, key
    assert report["errors"] == 0
    assert report["other_count"] == 0
    assert len(report["largest_files"]) == 10
    assert report["allocated_bytes"] >= 0
    assert report["root"] == str(sample)


def test_disk_usage_counts_hard_links_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"y" * 5000)
    os.link(tmp_path / "a", tmp_path / "b")
    report = json.loads(run("disk_usage.py", tmp_path).stdout)
    assert report["file_count"] == 1
    assert report["total_bytes"] == 5000


def test_disk_usage_counts_fifos_as_other(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    report = json.loads(run("disk_usage.py", tmp_path).stdout)
    assert report["other_count"] == 1
    assert report["file_count"] == 0


@pytest.fixture
def tree_with_unreadable_dir() -> Iterator[tuple[Path, dict[str, Any]]]:
    """A tree with one directory we may not list, and how to run the script as someone who
    really cannot list it (interpreter, and user/group when we are root)."""
    root = Path(tempfile.mkdtemp(prefix="ql3-du-"))
    try:
        root.chmod(0o755)
        (root / "readable").mkdir(mode=0o755)
        (root / "readable" / "f").write_bytes(b"z" * 100)
        (root / "readable" / "f").chmod(0o644)
        (root / "locked").mkdir()
        (root / "locked" / "secret").write_bytes(b"s" * 100)
        (root / "locked").chmod(0)
        # root ignores permission bits: run the script as "nobody" instead.
        as_user: dict[str, Any] = {"executable": sys.executable}
        if os.geteuid() == 0:
            # The script is stdlib only; nobody may not reach this venv's interpreter.
            system_python = shutil.which("python3", path="/usr/bin:/bin")
            if system_python is None:
                pytest.skip("no system python3 that an unprivileged user can run")
            as_user = {"executable": system_python, "user": 65534, "group": 65534}
        yield root, as_user
    finally:
        (root / "locked").chmod(0o700)
        shutil.rmtree(root)


def test_disk_usage_counts_permission_errors_and_goes_on(
    tree_with_unreadable_dir: tuple[Path, dict[str, Any]],
) -> None:
    root, how = tree_with_unreadable_dir
    result = subprocess.run(
        [how["executable"], str(EXAMPLES / "disk_usage.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        user=how.get("user"),
        group=how.get("group"),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["errors"] == 1
    assert report["file_count"] == 1
    assert report["total_bytes"] == 100
    assert report["top_level"] == {"locked": 0, "readable": 100}


# --- fail.sh and slow_with_child.sh ---------------------------------------------------------------


def test_fail_sh_writes_both_streams_and_exits_3() -> None:
    result = run("fail.sh", check_rc=3)
    assert result.stdout.strip()
    assert result.stderr.strip()


def test_fail_sh_exit_code_can_be_chosen() -> None:
    run("fail.sh", "7", check_rc=7)
    run("fail.sh", "300", check_rc=2)


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Orphans of our children are re-parented to us, so we can reap and inspect them."""
    libc = ctypes.CDLL(None, use_errno=True)
    previous = ctypes.c_int(0)
    if libc.prctl(37, ctypes.byref(previous), 0, 0, 0) != 0:  # PR_GET_CHILD_SUBREAPER
        pytest.skip("prctl(PR_GET_CHILD_SUBREAPER) unavailable")
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        pytest.skip("prctl(PR_SET_CHILD_SUBREAPER) unavailable")
    try:
        yield
    finally:
        libc.prctl(36, previous.value, 0, 0, 0)


def test_slow_with_child_is_killed_with_its_background_child_by_group_signal(
    subreaper: None,
) -> None:
    shell = subprocess.Popen(
        [str(EXAMPLES / "slow_with_child.sh")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as the launcher does: the task leads its own group
    )
    assert shell.stdout is not None
    try:
        line = shell.stdout.readline()
        match = re.search(r"background child pid (\d+)", line)
        assert match, line
        child = int(match.group(1))
        assert os.getpgid(child) == shell.pid
        time.sleep(0.2)
        assert shell.poll() is None  # still waiting: it would run for 300 s

        # Killing only the shell would orphan the sleep; the group signal takes both.
        assert signal_group(shell.pid, signal.SIGKILL)
        assert shell.wait(timeout=5) == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while (reaped := os.waitpid(child, os.WNOHANG))[0] != child:
            assert time.monotonic() < deadline, "background child survived the group kill"
            time.sleep(0.005)
        assert os.WIFSIGNALED(reaped[1])
        assert os.WTERMSIG(reaped[1]) == signal.SIGKILL
        assert not group_exists(shell.pid)
    finally:
        shell.stdout.close()
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()


def test_slow_with_child_finishes_when_its_child_does() -> None:
    result = run("slow_with_child.sh", "0", check_rc=0)
    assert "background child pid" in result.stdout
