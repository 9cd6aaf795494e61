"""``ql3 local import-qinglong``."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import click

from qinglong.local.app.backend import open_backend
from qinglong.local.app.cli_common import data_dir_option, datadir_of, json_option, print_json
from qinglong.shared.errors import ValidationError

# The serve socket takes requests up to 1 MiB (server.MAX_REQUEST_BYTES); keep a margin.
SOCKET_SOURCE_MAX_BYTES = 1024 * 1024 - 4096


@click.command("import-qinglong")
@click.argument("path", metavar="PATH/database.sqlite",
                type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--scripts-dir", default=None, metavar="DIR",
              type=click.Path(file_okay=False),
              help="Where the 2.x scripts are (default: scripts/ beside the db/ directory).")
@click.option("--timezone", default="Asia/Shanghai", show_default=True, metavar="TZ",
              help="Time zone the 2.x schedules are read in (2.x images use Asia/Shanghai).")
@click.option("--dry-run", is_flag=True, help="Report what would be imported; change nothing.")
@data_dir_option
@json_option
def import_qinglong(
    path: str,
    scripts_dir: str | None,
    timezone: str,
    dry_run: bool,
    data_dir: str | None,
    as_json: bool,
) -> None:
    """Import crons and environment variables from a Qinglong 2.x database.

    The 2.x file is opened read-only and never changed. Crons become tasks labelled
    ql2:<id> (importing again skips them); enabled Envs become global variables that every
    task receives (same name: values joined with &). Subscriptions, now/conc/desi modes and
    `ql repo`/`ql raw` rows are reported, not imported. Variable values are never printed.
    """
    from qinglong.local.app.legacy_import import read_legacy_database
    from qinglong.shared.cron import parse_schedule

    parse_schedule("@once", timezone)  # bad input exits 2 here, with or without serve
    source = read_legacy_database(path, scripts_dir).to_json()
    options = {"timezone": timezone, "dry_run": dry_run}
    with open_backend(datadir_of(data_dir), "import-qinglong") as backend:
        if backend.remote and len(json.dumps(source)) > SOCKET_SOURCE_MAX_BYTES:
            raise ValidationError("database", "too large to send to the running serve; stop "
                                              "`ql3 local serve` and import again")
        report: dict[str, Any] = backend.call("legacy_import", source=source, options=options)
    if as_json:
        print_json(report)
    else:
        print_report(report)


def print_report(report: dict[str, Any]) -> None:
    """The import report as text, every line within the terminal's width (``--wide``: whole):
    the counts, the zone the schedules are read in, then one line per imported task (with
    ``renamed from NAME`` when the 2.x name was taken or not a valid name), skipped row and
    variable."""
    from qinglong.local.app.legacy_import import DEFAULT_TIMEZONE
    from qinglong.shared import display

    summary = report["summary"]
    verb = "would import" if report["dry_run"] else "imported"
    fit = display.fit_line
    click.echo(fit(f"{verb} {summary['tasks_imported']} task(s) and "
                   f"{summary['variables_imported']} variable(s)"
                   + (" (dry run: nothing changed)" if report["dry_run"] else "")))
    click.echo(fit(f"skipped {summary['tasks_skipped']} cron row(s) and "
                   f"{summary['variables_skipped']} env row(s)"))
    click.echo(fit(f"from {report['source']}"))
    click.echo(fit(f"schedules read in {report['timezone']}"
                   + (" (Qinglong's default; --timezone to change)"
                      if report["timezone"] == DEFAULT_TIMEZONE else "")))
    for task in report["tasks"]["imported"]:
        state = "" if task["enabled"] else " [disabled]"
        notes = list(task["warnings"])
        original = task.get("original_name") or ""
        if original and unicodedata.normalize("NFC", original.strip()) != task["name"]:
            notes.insert(0, f"renamed from {original}")
        extra = f" ({', '.join(notes)})" if notes else ""
        click.echo(fit(f"  + {task['key']:>8} {task['name']} {task['schedule']!r}{state}{extra}"))
    for row in report["tasks"]["skipped"]:
        click.echo(fit(f"  - {row['key'] or '?':>8} {row['name'] or '(no name)'}: "
                       f"{row['reason']}"))
    for var in report["variables"]["imported"]:
        click.echo(fit(f"  $ {var['name']} ({var['values']} value(s), {var['status']})"))
    for row in report["variables"]["skipped"]:
        click.echo(fit(f"  - env {row['id']} {row['name'] or '(no name)'}: {row['reason']}"))
