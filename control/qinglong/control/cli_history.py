"""``ql3 control history status``: cluster history pruning at a glance (docs/operations.md
"History pruning").

Prints the retention, the horizon, how many terminal runs are past it (due unless kept: a
task's newest runs, a live lease, a log not yet retired) and what the last batch did, in at
most 80 columns; ``--json`` prints ``history_status``'s document. Any role that can read the
job row may run it (the runtime role can).
"""

from __future__ import annotations

import json
from typing import Any

import click

from qinglong.control.cli_errors import checked_database_url


@click.group()
def history() -> None:
    """Cluster history pruning (runs, attempts, events, occurrences)."""


@history.command()
@click.option("--database-url", envvar="QL3_DATABASE_URL", required=True,
              callback=lambda _c, _p, v: checked_database_url(v, option="--database-url"),
              help="PostgreSQL URL, postgresql://... (env QL3_DATABASE_URL).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(database_url: str, as_json: bool) -> None:
    """What is due and what the last batch did."""
    from qinglong.control.db.engine import create_engine
    from qinglong.control.errors import NotReadyError
    from qinglong.control.history.prune import history_status
    from qinglong.control.readiness import schema_readiness

    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with engine.begin() as conn:
            verdict = schema_readiness(conn)
        if not verdict.ready:
            raise NotReadyError(f"not ready: {verdict.reason} ({verdict.detail})")
        with engine.connect() as conn:
            out = history_status(conn)
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(out, sort_keys=True, ensure_ascii=False))
        return
    click.echo("\n".join(render(out)))


def render(out: dict[str, Any]) -> list[str]:
    """``history_status``'s document as lines of at most 80 columns (Chinese labels)."""
    days = out["retention_s"] / 86400
    lines = [f"保留期      {days:g} 天（每个任务保留最新 {out['keep_runs']} 次运行）",
             f"截止时间    {out['horizon'][:19]}Z",
             f"待清理      {out['past_horizon']} 次运行早于截止时间",
             f"已清理      {out['total_runs']} 次运行，共 {out['passes']} 轮"]
    last = out["last_batch"]
    if last is None:
        lines.append("上一批      无")
    else:
        lines.append(f"上一批      {last['at'][:19]}Z  {last['owner'][:30]}")
        lines.append(f"            扫描 {last['scanned']}  运行 {last['runs']}  "
                     f"尝试 {last['attempts']}  事件 {last['events']}  "
                     f"调度 {last['occurrences']}  保留 {last['kept']}")
    return lines
