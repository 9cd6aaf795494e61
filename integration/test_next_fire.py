"""Stored next fire times as the user sees them through the real `ql3` (issue 10 item 1,
docs/protocols.md §3.7): `task show` says when a task fires next; add, import and enable leave it
pending until `serve` computes it; disable clears it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from harness import Ql3, wait_for


def _next_daily_0300() -> str:
    now = dt.datetime.now(dt.UTC)
    at = now.replace(hour=3, minute=0, second=0, microsecond=0)
    if at <= now:
        at += dt.timedelta(days=1)
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _show(ql3: Ql3, name: str) -> dict[str, Any]:
    view: dict[str, Any] = ql3.json("local", "task", "show", name)
    return view


def test_task_show_gives_the_next_fire_time_serve_computed_and_disable_clears_it(
    ql3: Ql3, tmp_path: Path
) -> None:
    ql3.run("local", "task", "add", "nightly", "--schedule", "0 3 * * *", "--", "true")
    ql3.run("local", "task", "add", "starter", "--schedule", "@boot", "--", "true")
    offline = _show(ql3, "nightly")
    assert (offline["next_fire"], offline["next_fire_pending"]) == (None, True)
    assert "pending (computed by the running serve)" in ql3.run(
        "local", "task", "show", "nightly").stdout

    serve = ql3.start_serve()
    try:
        assert wait_for(lambda: not _show(ql3, "nightly")["next_fire_pending"], 10)
        assert _show(ql3, "nightly")["next_fire"] == _next_daily_0300()
        assert _show(ql3, "starter")["next_fire"] is None  # @boot has no slot
        as_read = _next_daily_0300().replace("T", " ").replace(".000Z", " +00:00")
        assert f"next_fire: {as_read}" in ql3.run(
            "local", "task", "show", "nightly", "--utc").stdout  # issue 12 item 4

        ql3.run("local", "task", "add", "often", "--schedule", "*/2 * * * * *", "--", "true")
        assert wait_for(lambda: _show(ql3, "often")["next_fire"] is not None, 10)
        assert wait_for(lambda: ql3.json("local", "runs", "--task", "often"), 10)

        ql3.run("local", "task", "disable", "nightly")
        assert (_show(ql3, "nightly")["next_fire"], _show(ql3, "nightly")["next_fire_pending"]) \
            == (None, False)
        ql3.run("local", "task", "enable", "nightly")
        assert wait_for(lambda: _show(ql3, "nightly")["next_fire"] == _next_daily_0300(), 10)
    finally:
        assert ql3.stop_serve(serve) == 0
