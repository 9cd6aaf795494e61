"""Push notifications of the cluster (migration 0009, docs/protocols.md §4.5 "Push channels").

Each tick of a replica's ``notify`` loop (:func:`tick`): queue one notification per
(terminal run, channel) whose status is in the channel's ``notify_on`` and which ended after
the channel was added (``INSERT … ON CONFLICT DO NOTHING``: every replica may try); claim up
to :data:`BATCH` pending ones whose claim is free (``FOR UPDATE SKIP LOCKED``, a claim of
:data:`CLAIM_S` seconds); send each through Apprise (``qinglong-cluster[control]`` carries
it) in a helper thread bounded by :data:`SEND_TIMEOUT_S`; record ``sent``, or back to
``pending`` after the shared backoff, ``failed`` after :data:`MAX_TRIES`. A crash between
sending and recording repeats a send once the claim expires: at least once, each message
carrying the notification's stable id. The outcome is a run event ``notify_sent`` /
``notify_failed`` naming the channel by scheme and host; a URL (a secret) is never in an
answer, event, log line or metric, and a failing channel never changes a run. Once sealing
is on (migration 0014) a channel's URL is stored sealed and opened here only to send.
"""

from __future__ import annotations

import json
import threading
import warnings
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.shared.backoff import retry_delay_s
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from qinglong.control.secrets.sealing import Keyring

BATCH = 10
CLAIM_S = 60
SEND_TIMEOUT_S = 10.0
MAX_TRIES = 5
STATUSES = ("failed", "timed_out", "lost", "succeeded", "cancelled")
RECENT = "1 day"  # runs that ended longer ago are never queued


def channel_target(url: str) -> str:
    """``bark://push.example.com/…``: the scheme, and the host when it looks like one (a
    dot, ``localhost``, an IPv6 literal); never a path, query, user info or a token host."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    shown = host if ("." in name or name == "localhost" or name.startswith("[")) else ""
    return f"{scheme.lower()}://{shown}/…" if shown else f"{scheme.lower()}://…"


def send(url: str, title: str, body: str, timeout_s: float = SEND_TIMEOUT_S) -> str | None:
    """Send once through an Apprise URL within ``timeout_s`` seconds; None on success,
    else a class of failure (never the URL)."""
    with warnings.catch_warnings():  # Apprise's plugin imports warn (imghdr on 3.11)
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import apprise
        except ImportError:
            return "Apprise is not installed"
        sender = apprise.Apprise()
        if not sender.add(url):
            return "not a URL Apprise knows"
    done: list[bool] = []

    def push() -> None:
        try:
            done.append(bool(sender.notify(title=title, body=body)))
        except Exception:  # a plugin's failure is an outcome
            done.append(False)

    thread = threading.Thread(target=push, name="ql3-notify-send", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not done:
        return "timed out"
    return None if done[0] else "delivery failed"


def message(row: Any, test: bool = False) -> tuple[str, str]:
    """Title and body for a run's notification (no secret, no output, the stable id)."""
    what = f"{row['task_name']}#{row['run_number']} {row['status']}"
    return (f"{'[test] ' if test else ''}ql3: {what}",
            f"{'[test] ' if test else ''}ql3: task {what} (notification {row['id']})")


def enqueue(engine: Engine) -> int:
    """Queue the notifications of recently ended runs; returns how many were new."""
    with engine.begin() as conn:
        return int(run_named(conn, (
            "INSERT INTO notifications (id, run_id, channel_id)"
            " SELECT gen_random_uuid(), r.id, c.id FROM runs r JOIN notify_channels c"
            "   ON r.status = ANY (c.notify_on) AND r.finished_at >= c.created_at"
            " WHERE r.finished_at > now() - %(recent)s::interval"
            " ON CONFLICT (run_id, channel_id) DO NOTHING"), {"recent": RECENT}).rowcount)


def claim(engine: Engine) -> list[dict[str, Any]]:
    """Claim up to BATCH pending notifications for CLAIM_S seconds (tries counted)."""
    with engine.begin() as conn:
        return [dict(r) for r in run_named(conn, (
            "WITH picked AS MATERIALIZED (SELECT id FROM notifications"
            "   WHERE status = 'pending' AND (claimed_until IS NULL OR claimed_until < now())"
            "   ORDER BY created_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"
            " UPDATE notifications n SET claimed_until = now() + %(claim)s * interval '1 s',"
            "   tries = n.tries + 1 FROM picked, notify_channels c, runs r, tasks t"
            " WHERE n.id = picked.id AND c.id = n.channel_id AND r.id = n.run_id"
            "   AND t.id = r.task_id"
            " RETURNING n.id::text AS id, n.run_id::text AS run_id, n.tries, c.url, c.target,"
            "   c.id::text AS channel_id, c.sealed_url,"
            "   r.status, r.number AS"
            "   run_number, t.name AS task_name"),
            {"batch": BATCH, "claim": CLAIM_S}).mappings()]


def record(engine: Engine, row: dict[str, Any], error: str | None) -> None:
    """Record one send's outcome and its run event (no URL)."""
    done = error is None or row["tries"] >= MAX_TRIES
    status = "sent" if error is None else "failed" if done else "pending"
    delay = 0.0 if done else retry_delay_s(int(row["tries"]), base_s=2.0, cap_s=60.0)
    detail = {"channel": row["target"].partition(":")[0], "target": row["target"],
              "notification_id": str(row["id"]), "tries": row["tries"], "ok": error is None}
    if error is not None:
        detail["error"] = error
    with engine.begin() as conn:
        run_named(conn, (
            "UPDATE notifications SET status = %(status)s, last_error = %(error)s,"
            " claimed_until = CASE WHEN %(done)s THEN NULL"
            "   ELSE now() + %(delay)s * interval '1 s' END,"
            " finished_at = CASE WHEN %(done)s THEN now() END WHERE id = %(id)s"),
            {"status": status, "error": error, "done": done, "delay": delay, "id": row["id"]})
        if done:
            run_named(conn, (
                "INSERT INTO events (id, run_id, kind, to_status, detail)"
                " VALUES (%(id)s, %(run)s, %(kind)s, %(status)s, %(detail)s::jsonb)"),
                {"id": uuid7(), "run": row["run_id"], "status": row["status"],
                 "kind": "notify_sent" if error is None else "notify_failed",
                 "detail": json.dumps(detail)})


def channel_url(keyring: Keyring | None, row: Any) -> str | None:
    """The plain URL of a channel row (``channel_id``/``id``, ``url``, ``sealed_url``),
    opened with ``keyring`` when sealed (docs/operations.md "Secret values at rest"); None
    when it cannot be opened (no keyring, a key the ring lacks, a changed value): the send
    then fails with a class of failure that names no URL."""
    from qinglong.control.secrets.store import opened_channel_url
    from qinglong.shared.errors import QinglongError

    try:
        return opened_channel_url(keyring, str(row.get("channel_id") or row["id"]),
                                  str(row["url"]), row.get("sealed_url"))
    except QinglongError:
        return None


def _send_to(keyring: Keyring | None, row: Any, title: str, body: str) -> str | None:
    url = channel_url(keyring, row)
    return "the sealed channel URL does not open" if url is None else send(url, title, body)


def tick(engine: Engine, keyring: Keyring | None = None) -> int:
    """Queue, claim, send and record one batch; returns how many were sent or settled.
    ``keyring`` opens sealed channel URLs (None: only plain ones are sent)."""
    enqueue(engine)
    rows = claim(engine)
    for row in rows:
        record(engine, row, _send_to(keyring, row, *message(row)))
    return len(rows)


def test_channels(engine: Engine, keyring: Keyring | None) -> list[dict[str, Any]]:
    """Send a sample to every channel now: ``[{"id", "target", "ok", "error"?}]``;
    ``keyring`` opens sealed channel URLs."""
    with engine.connect() as conn:
        channels = [dict(r) for r in run_named(
            conn, "SELECT id, url, sealed_url, target FROM notify_channels"
                  " ORDER BY created_at").mappings()]
    out = []
    for ch in channels:
        sample = {"task_name": "ql3-notify-test", "run_number": 1, "status": "failed",
                  "id": uuid7()}
        error = _send_to(keyring, ch, *message(sample, test=True))
        out.append({"id": str(ch["id"]), "target": ch["target"], "ok": error is None,
                    **({"error": error} if error else {})})
    return out
