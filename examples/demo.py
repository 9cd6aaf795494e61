"""The README's main job: register real maintenance scripts and run each once, for real,
then say how to keep them running and how to open the web panel (docs/panel.md). With
``--serve [--listen HOST:PORT]`` it then becomes ``ql3 local serve --web`` on the same data
directory (exec, foreground): the schedules keep running and the panel prints its URL and
one-time sign-in link; Ctrl-C stops both.

Uses only the `ql3` command line, exactly as a person would, on the data directory
./demo-data (override with QL3_DATA_DIR). Re-running is safe: existing tasks are kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from qinglong.shared.display import fit_line, terminal_width, text_width

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DATA = Path(os.environ.get("QL3_DATA_DIR") or ROOT / "demo-data").resolve()
SAMPLE = DATA / "sample"
QL3 = [str(Path(sys.executable).parent / "ql3")]
PY = sys.executable
# where `ql3 local web` listens by default (its --listen); the sign-in token is made by the
# running panel and lives in its memory, so the demo can show the command, never the link
PANEL_URL = "http://127.0.0.1:5700/"

TASKS: list[tuple[str, str, list[str], list[str]]] = [
    # name, schedule, extra options, argv
    (
        "compress-logs",
        "0 3 * * *",
        [],
        [PY, str(EXAMPLES / "compress_old_logs.py"), str(SAMPLE / "logs"), "7"],
    ),
    (
        "backup-db",
        "30 2 * * *",
        ["--timeout", "60"],
        [
            PY,
            str(EXAMPLES / "backup_sqlite.py"),
            str(SAMPLE / "db" / "app.sqlite"),
            str(SAMPLE / "backups"),
        ],
    ),
    ("disk-usage", "*/15 * * * *", [], [PY, str(EXAMPLES / "disk_usage.py"), str(SAMPLE)]),
    ("always-fails", "0 * * * *", [], ["/bin/sh", str(EXAMPLES / "fail.sh")]),
    (
        "too-slow",
        "*/5 * * * *",
        ["--timeout", "2"],
        ["/bin/sh", str(EXAMPLES / "slow_with_child.sh"), "300"],
    ),
]


def ql3(*args: str, check: bool = True) -> str:
    """Run ql3 with the demo data directory; return stdout."""
    env = dict(os.environ, QL3_DATA_DIR=str(DATA))
    proc = subprocess.run([*QL3, *args], env=env, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"demo: `ql3 {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc.stdout


def main(arguments: list[str] | None = None) -> int:
    """Set up, run every example once, summarise; every line fits the terminal (80 columns
    without one: ``COLUMNS``), a log line cut with ``…``. With ``--serve`` (and the panel
    installed) it ends by exec'ing ``ql3 local serve --web`` instead of returning."""
    parser = argparse.ArgumentParser(
        prog="scripts/demo.sh", description="Register the example scripts, run each once, "
        "and say how to keep them running and open the web panel.")
    parser.add_argument("--serve", action="store_true",
                        help="then keep the schedules running and serve the web panel "
                             "(ql3 local serve --web) until Ctrl-C")
    parser.add_argument("--listen", default=None, metavar="HOST:PORT",
                        help="with --serve: where the panel listens (default 127.0.0.1:5700)")
    args = parser.parse_args(arguments)
    if args.listen and not args.serve:
        parser.error("--listen goes with --serve")
    # the data directory as typed from here when it is below (the last lines repeat it)
    data = os.path.relpath(DATA) if DATA.is_relative_to(Path.cwd()) else str(DATA)
    line = f"== data directory: {data}"
    print(line if text_width(line) <= terminal_width() else f"== data directory:\n    {data}")
    DATA.mkdir(parents=True, exist_ok=True)
    print(fit_line(ql3("local", "init", "--profile", "standalone").strip()))
    if not SAMPLE.exists():
        subprocess.run(
            [PY, str(EXAMPLES / "make_sample_data.py"), str(SAMPLE)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    existing = {t["name"] for t in json.loads(ql3("local", "task", "list", "--json"))}
    for name, schedule, options, argv in TASKS:
        if name not in existing:
            ql3(
                "local",
                "task",
                "add",
                name,
                "--schedule",
                schedule,
                "--cwd",
                str(SAMPLE),
                *options,
                "--",
                *argv,
            )
            print(f"registered {name:<14} schedule {schedule!r}")
    print()
    outcomes = {}
    for name, _schedule, _options, _argv in TASKS:
        # exit 1 just means the run did not succeed: the JSON says how it ended
        run = json.loads(ql3("local", "run", name, "--wait", "--json", check=False))
        outcomes[name] = run
        log = ql3("local", "logs", run["id"])
        head = "\n".join(fit_line("    | " + line) for line in log.splitlines()[:6])
        exit_text = (
            run["exit_code"]
            if run["signal"] is None
            else (f"{run['exit_code']} (signal {run['signal']})")
        )
        print(f"== {name}: {run['status']}, exit code {exit_text}")
        print(head or "    | (no output)")
        if name == "too-slow":
            print(f"    child process left behind: {_child_alive(log)}")
    print()
    print(ql3("local", "runs", "--limit", "10"))
    ok = (
        outcomes["compress-logs"]["status"] == "succeeded"
        and outcomes["always-fails"]["status"] == "failed"
        and outcomes["always-fails"]["exit_code"] == 3
        and outcomes["too-slow"]["status"] == "timed_out"
    )
    if args.serve and ok:
        print("== the scheduler and the panel (ql3 local serve --web; Ctrl-C stops both):",
              flush=True)
        listen = ["--listen", args.listen] if args.listen else []
        command = [QL3[0], "local", "serve", "--web", *listen, "--data-dir", str(DATA)]
        os.execv(QL3[0], command)  # noqa: S606 - our own ql3, no shell
    print("To keep these schedules running, start the scheduler in the foreground:")
    print(command_lines(".venv/bin/ql3 local serve --data-dir", data))
    print("and watch it from another terminal:")
    print(command_lines(".venv/bin/ql3 local runs --data-dir", data))
    print("Open the web panel (docs/panel.md) while the scheduler runs, with:")
    print(command_lines(".venv/bin/ql3 local web --data-dir", data))
    print(f"It serves {PANEL_URL} and prints the one-time sign-in link to open:")
    print(f"    {PANEL_URL}signin?token=…")
    print("(a new token each start; Ctrl-C stops the panel)")
    if importlib.util.find_spec("qinglong.panel") is None:
        print("The panel is not installed here: bash scripts/bootstrap.sh web")
    print("Or both in one: bash scripts/demo.sh --serve (Ctrl-C stops them).")
    print("See docs/systemd.md to run it as a service.")
    return 0 if ok else 1


def command_lines(command: str, path: str) -> str:
    """``command path`` indented to copy; when that is wider than the terminal, the path
    goes on a continuation line (`` \\``) so a long data directory is never cut."""
    one = f"    {command} {path}"
    if text_width(one) <= terminal_width():
        return one
    return f"    {command} \\\n        {path}"


def _child_alive(log: str) -> str:
    """Whether the background child that slow_with_child.sh printed still exists."""
    for line in log.splitlines():
        if "background child pid" in line:
            pid = int(line.rsplit(" ", 1)[1])
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    state = fh.read().rpartition(")")[2].split()[0]
            except FileNotFoundError:
                state = "gone"
            alive = state not in ("gone", "Z", "X")  # a zombie has exited
            return "yes (BUG)" if alive else "no (the whole process group was killed)"
    return "unknown (no pid printed)"


if __name__ == "__main__":
    sys.exit(main())
