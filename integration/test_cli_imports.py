"""Each `ql3` command imports what it runs (docs/architecture.md §1 "Each command loads what it
runs"): `--help` loads no engine and no server library, a command that a running `serve`
answers loads no storage, and one that owns the data directory for a moment loads storage
but not the engine that `serve` assembles (coordinator, launcher, scheduler, notifier).

The real `ql3` binary runs with ``PYTHONPROFILEIMPORTTIME=1`` (``python -X importtime``) and
the modules it imported are read from its report on stderr: module sets, never times (the
times are in bench/README.md, "Command start").
"""

from __future__ import annotations

import subprocess

import pytest

from harness import QL3, Ql3

pytestmark = pytest.mark.integration

# what `ql3 local serve` assembles on top of the store: never a command line's but serve's
# (and a foreground `run`'s)
ENGINE = ("qinglong.local.execution", "qinglong.local.scheduling.scheduler",
          "qinglong.local.app.application", "qinglong.local.app.local_application",
          "qinglong.local.app.notifier", "qinglong.local.process.launcher",
          "qinglong.local.recovery.cleanup_scanner", "qinglong.local.recovery.retention")
# the data directory itself: a socket client and a --help touch none of it
STORAGE = ("sqlite3", "qinglong.local.storage", "qinglong.local.app.store",
           "qinglong.local.app.service", "qinglong.local.app.ops", "croniter")
SERVER_LIBRARIES = ("psycopg", "psycopg_pool", "sqlalchemy", "boto3", "botocore", "fastapi",
                    "pydantic", "starlette", "uvicorn", "jinja2")
HTTP = ("httpx", "httpcore")


def _imported(ql3: Ql3, *args: str, stdin: str | None = None) -> tuple[set[str], str]:
    """The modules the real `ql3 ARGS` imported, and its stdout. Asserts exit 0."""
    proc = subprocess.run([QL3, *args], env={**ql3.env, "PYTHONPROFILEIMPORTTIME": "1"},
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)
    report = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert proc.returncode == 0, [line for line in proc.stderr.splitlines()
                                  if line not in report]
    modules = {line.rsplit("|", 1)[1].strip() for line in report if "|" in line}
    assert {"click", "qinglong.local.app.cli"} <= modules  # the report is real
    return modules, proc.stdout


def _loaded(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    """The modules of ``modules`` that are, or are inside, one of ``forbidden``."""
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize("argv", [
    ["--help"], ["local", "--help"], ["local", "task", "--help"],
    ["local", "task", "add", "--help"], ["local", "runs", "--help"],
    ["local", "settings", "--help"], ["local", "vars", "--help"],
], ids=" ".join)
def test_local_help_loads_no_engine_storage_or_server_library(
        ql3: Ql3, argv: list[str]) -> None:
    modules, out = _imported(ql3, *argv)
    assert "Usage: ql3" in out
    assert _loaded(modules, ENGINE + STORAGE + SERVER_LIBRARIES + HTTP) == []


@pytest.mark.parametrize("argv", [
    ["cluster", "--help"], ["cluster", "task", "--help"], ["cluster", "task", "list", "--help"],
    ["control", "--help"], ["worker", "--help"],
], ids=" ".join)
def test_cluster_help_loads_no_server_or_http_library(ql3: Ql3, argv: list[str]) -> None:
    """`ql3 cluster|control|worker --help` lists and explains without the libraries the
    commands use when they run (httpx for the client; SQLAlchemy, boto3, FastAPI for
    control), and without the local engine."""
    modules, out = _imported(ql3, *argv)
    assert "Usage: ql3" in out
    assert _loaded(modules, SERVER_LIBRARIES + HTTP + ENGINE + STORAGE) == []


def test_commands_a_running_serve_answers_load_no_storage(ql3: Ql3) -> None:
    """With `serve` up, `task add`, `task list`, `task show`, `runs`, `vars list` and
    `settings show` are socket clients: no SQLite, repository, service or croniter."""
    serve = ql3.start_serve()
    try:
        modules, out = _imported(ql3, "local", "task", "add", "备份", "--schedule", "0 3 * * *",
                                 "--timezone", "Asia/Shanghai", "--", "/bin/true")
        assert out.startswith("added task 备份 (")
        assert _loaded(modules, ENGINE + STORAGE + SERVER_LIBRARIES + HTTP) == []
        for argv in (["task", "list"], ["task", "show", "备份"], ["runs"], ["vars", "list"],
                     ["settings", "show"], ["task", "list", "--json"]):
            modules, out = _imported(ql3, "local", *argv)
            assert _loaded(modules, ENGINE + STORAGE + SERVER_LIBRARIES + HTTP) == [], argv
            if argv[:2] == ["task", "list"]:
                assert "备份" in out  # the task list came through the socket, zones and all
    finally:
        assert ql3.stop_serve(serve) == 0


def test_commands_without_serve_load_storage_but_not_the_engine(ql3: Ql3) -> None:
    """Without `serve` the command owns the directory for a moment: it opens the store and
    the service (their modules load), never the coordinator, launcher, scheduler or
    notifier that only `serve` and a foreground `run` assemble."""
    modules, _ = _imported(ql3, "local", "task", "add", "备份", "--schedule", "0 3 * * *",
                           "--timezone", "UTC", "--", "/bin/true")
    assert {"sqlite3", "qinglong.local.storage.repository"} <= modules  # it did open the store
    assert _loaded(modules, ENGINE + SERVER_LIBRARIES + HTTP) == []
    for argv in (["task", "list"], ["runs"], ["status"]):
        modules, out = _imported(ql3, "local", *argv)
        assert _loaded(modules, ENGINE + SERVER_LIBRARIES + HTTP) == [], argv
        if argv == ["task", "list"]:
            assert "备份" in out
