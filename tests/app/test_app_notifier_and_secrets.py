"""The notifier's queue never blocks its caller; a secret whose variable vanished fails the
attempt by name (issue 12 items 7 and 9)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from qinglong.local.app.application import LocalStack
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.notifier import Notifier, NotifyConfig, run_facts, sample_run
from qinglong.local.app.store import LocalStore
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository


def _store(tmp_path: Path) -> LocalStore:
    datadir = DataDir.at(str(tmp_path / "data"))
    datadir.create()
    open_database(datadir.db_path).close()
    return LocalStore(datadir, "test")


def test_a_full_notification_queue_drops_at_once_instead_of_blocking(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "q.db"))
    try:
        notifier = Notifier(LocalRunRepository(db), dict, "/", queue_max=2)  # never started
        run = sample_run(1_000_000)
        began = time.monotonic()
        accepted = [notifier.submit(run) for _ in range(5)]
        # the notifier was never started: a submit that blocked would never return
        assert time.monotonic() - began < 5
        assert accepted == [True, True, False, False, False] and notifier.dropped == 3
    finally:
        db.close()


def test_the_facts_carry_no_command_environment_or_output() -> None:
    facts = run_facts(sample_run(1_000_000))
    assert set(facts) == {"kind", "host", "task", "task_id", "run_id", "status", "trigger",
                          "exit_code", "signal", "attempts", "scheduled_at", "finished_at",
                          "duration_s", "message"}
    assert facts["duration_s"] == 1.5 and facts["status"] == "failed"


def test_the_notifier_skips_statuses_outside_notify_on(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "n.db"))
    try:
        repo = LocalRunRepository(db)
        repo.set_setting("notify_command", '["/bin/true"]')
        repo.set_setting("notify_on", "succeeded")
        notifier = Notifier(repo, dict, "/")
        assert notifier.config() == NotifyConfig(argv=("/bin/true",), on=frozenset({"succeeded"}))
        assert notifier.deliver(sample_run(1_000_000)) == []  # the sample failed
    finally:
        db.close()


def test_a_secret_whose_variable_vanished_fails_the_attempt_naming_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        stack = LocalStack(store, grace_s=1.0)
        service = stack.service()
        service.vars_set("TOKEN", "hidden-value")
        service.task_add({"name": "t", "schedule": "@once", "argv": ["true"],
                          "secret_env": {"API": {"variable": "TOKEN"}}})
        store.db.write(lambda c: c.execute("DELETE FROM global_variables"))  # behind our back
        run = service.run_now("t")
        done = stack.supervise(run["id"], threading.Event())
        view = service.run_get(run["id"])
        stack.coordinator.drain()
    finally:
        store.close()
    assert done.status.value == "failed"
    finished = [e for e in view["events"] if e["kind"] == "attempt_status" and
                e["to"] == "failed"] or view["events"]
    text = repr(finished)
    assert "secret_variable_missing" in text and "TOKEN" in text and "hidden" not in text
