"""Cluster notifications claimed through the database (control/notify.py; docs/protocols.md
§4.5 "Push channels"), on real PostgreSQL as the runtime role: queued once per run and
channel however many replicas try, a claim held by one replica at a time, a claim left by a
crashed replica taken again with the same stable id (at least once), retried with backoff,
settled as failed after the last try with a run event that names no URL."""

from __future__ import annotations

import json
import socket

import pytest
from pg_control_db import PgDb, seed_run

from qinglong.control import notify
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
SECRET = "ChannelToken42"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_notification_is_queued_once_claimed_once_and_retaken_after_a_crash(
    pg_db: PgDb,
) -> None:
    with pg_db.sa() as conn:
        failed = seed_run(conn, run_status="failed", finished_ago_s=60)
        seed_run(conn, run_status="succeeded", finished_ago_s=60)  # not in notify_on
    url = f"json://127.0.0.1:{_closed_port()}/hook/{SECRET}"
    with pg_db.connect() as admin:
        admin.execute("INSERT INTO notify_channels (id, url, target, notify_on, created_at)"
                      " VALUES (%s, %s, %s, '{failed}', now() - interval '2 hours')",
                      (uuid7(), url, notify.channel_target(url)))
    with pg_db.pooled(pg_db.runtime_url) as engine:
        assert [notify.enqueue(engine) for _ in range(2)] == [1, 0]  # replicas may race
        (first,) = notify.claim(engine)
        assert first["run_id"] == failed.run_id and first["tries"] == 1
        assert notify.claim(engine) == []  # held by the first claimer
        with pg_db.connect() as admin:  # that replica died before recording: claim expires
            admin.execute("UPDATE notifications SET claimed_until = now() - interval '1 s'")
        (again,) = notify.claim(engine)
        assert again["id"] == first["id"] and again["tries"] == 2  # the same stable id

        error = notify.send(again["url"], *notify.message(again), timeout_s=5)
        assert error is not None and SECRET not in error
        notify.record(engine, again, error)
        with pg_db.connect() as admin:
            status, until = admin.execute(
                "SELECT status, claimed_until > now() FROM notifications").fetchone()
        assert (status, until) == ("pending", True)  # back off before the next try

        notify.record(engine, {**again, "tries": notify.MAX_TRIES}, error)
    with pg_db.connect() as admin:
        assert admin.execute("SELECT status FROM notifications").fetchone()[0] == "failed"
        kind, detail = admin.execute("SELECT kind, detail FROM events WHERE run_id = %s"
                                     " AND kind LIKE 'notify_%%'", (failed.run_id,)).fetchone()
    assert kind == "notify_failed" and detail["target"].startswith("json://127.0.0.1:")
    assert detail["notification_id"] == str(first["id"]) and SECRET not in json.dumps(detail)
