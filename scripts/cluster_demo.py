"""See the cluster work on this machine, in one command (README "See the cluster work"; issue 13
item 3). Run it through ``bash scripts/cluster-demo``, which installs the venv first.

It starts moto's S3 server, a fresh database on the local PostgreSQL, two control replicas
and two workers (``cluster_demo_stage.py``); registers example tasks through ``ql3 cluster``,
one of them a script bundle pushed from ``examples/cluster_report``;
shows runs on both workers; SIGKILLs the worker running a slow task mid-run, then the control
replica the other worker talks to first; and checks, from the database and through
``ql3 cluster``, that:

- tasks ran on both workers;
- the slow task's processes (found by a marker in their command lines in ``/proc``) are gone
  within 2 s of the worker's SIGKILL, its attempt ends ``lost``, and the run is retried and
  succeeds on the other worker;
- after the replica's SIGKILL the surviving worker moves to the other replica, scheduled runs
  go on succeeding, and ``ql3 cluster`` (given the dead replica first) answers through the
  other;
- once the schedules are disabled every run ends terminal, ``ql3 cluster logs`` prints each
  sampled run's output, and every attempt of the bundle task ran the pushed bundle.

Then it stops everything it started (also on a failed check or Ctrl-C) and prints the
elapsed time. Exit 0 when every check held, 1 on the first that did not (named), 130 on
Ctrl-C.
"""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_demo_stage import (
    ACTIVE,
    QL3,
    ROOT,
    Stage,
    StageError,
    marked_pids,
    wait_for,
)

BUNDLE = ROOT / "examples" / "cluster_report"  # report.sh sources lib/measure.sh
FINISHED = ("succeeded", "failed", "cancelled", "timed_out", "lost")
KILL_GONE_S = 2.0  # the killed attempt's processes must be gone this soon after the SIGKILL


class CheckFailedError(Exception):
    """One check did not hold; the message says which and what was seen."""


class Narrator:
    """Prints one line per step, prefixed with the seconds since the start."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, text: str) -> None:
        print(wrapped(f"[{self.elapsed():5.1f}s] ", text, " " * 9), flush=True)

    def ok(self, text: str) -> None:
        print(wrapped("         ok: ", text, " " * 13), flush=True)


WIDTH = 80  # every line the demo prints fits 80 columns


def wrapped(first: str, text: str, indent: str) -> str:
    """``first`` + ``text`` wrapped at spaces to WIDTH columns, later lines after ``indent``
    (a word longer than a line stays whole)."""
    return "\n".join(textwrap.wrap(first + text, WIDTH, subsequent_indent=indent,
                                    break_long_words=False, break_on_hyphens=False))


def command_lines(args: list[str]) -> str:
    """``$ ql3 cluster ARGS`` as a shell would take it, continued with `` \\`` on lines of
    at most WIDTH columns (an argument is never split)."""
    lines, line = [], "$ ql3 cluster"
    for word in (shlex.quote(a) for a in args):
        if len(line) + 1 + len(word) + 2 > WIDTH:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line += " " + word
    return "\n".join([*lines, line])


def check(condition: object, failure: str) -> None:
    """Raise CheckFailedError(``failure``) unless ``condition`` is truthy."""
    if not condition:
        raise CheckFailedError(failure)


class Cli:
    """Runs ``ql3 cluster ARGS`` as a user would (78 columns, so that its output indented by
    2 fits 80; the replicas in ``QL3_CONTROL_URL``, the admin token in ``QL3_TOKEN``), shows
    the command and its output."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.urls = stage.control_urls()

    def __call__(self, *args: str) -> str:
        """Run, show, and return the output (stdout and stderr in the order written);
        CheckFailedError when the command exits non-zero."""
        env = self.stage.cluster.env(QL3_CONTROL_URL=self.urls,  # 78: shown indented by 2
                                     QL3_TOKEN=self.stage.admin_token, COLUMNS="78",
                                     PYTHONUNBUFFERED="1")  # stdout and stderr in order
        out = subprocess.run([QL3, "cluster", *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60, check=False,
                             cwd=ROOT)  # paths shown relative to the clone
        print(command_lines(list(args)))
        for line in out.stdout.rstrip("\n").splitlines():
            print(f"  {line}")
        check(out.returncode == 0, f"`ql3 cluster {shlex.join(args)}` exited "
                                   f"{out.returncode}: {out.stdout.strip()[-500:]}")
        return out.stdout


class Story:
    """The demo's steps, in order, each with its checks."""

    def __init__(self, stage: Stage, say: Narrator) -> None:
        self.stage = stage
        self.say = say
        self.cli = Cli(stage)
        self.marker = stage.marker()
        self.digest = ""  # the pushed bundle's

    def run(self) -> None:
        self.say.step(f"export QL3_CONTROL_URL={self.cli.urls} QL3_TOKEN=<the admin token>")
        self.register()
        self.on_both_workers()
        run_id, victim, pids = self.slow_run_started()
        survivor = next(n for n in self.stage.workers if n != victim)
        self.kill_worker(victim, pids)
        killed_at = self.kill_replica(survivor)
        self.retried(run_id, victim, survivor)
        self.goes_on(survivor, killed_at)
        self.all_terminal()
        self.logs()

    def register(self) -> None:
        self.say.step("register example tasks, one of them a pushed script bundle")
        self.cli("task", "add", "hello", "--schedule", "*/3 * * * * *", "--shell",
                 'echo "hello from the cluster at $(date -u +%T) UTC"; sleep 1')
        self.digest = self.push_bundle("report", BUNDLE, "report.sh", "*/3 * * * * *")
        m = self.marker  # in the command line of each of its processes, for /proc
        self.cli("task", "add", "slow", "--schedule", "@once", "--max-attempts", "2",
                 "--shell", f'sleep 5.{m} & sleep 6.{m} & wait; echo "slow: done"')

    def push_bundle(self, name: str, root: Path, entry_point: str, schedule: str) -> str:
        """Push directory ``root`` as a script bundle with ``ql3 cluster script push`` and add
        task ``name`` running its ``entry_point`` on ``schedule``; the bundle's digest."""
        pushed = self.cli("script", "push", str(root.relative_to(ROOT)))
        # at 78 columns the digest line is cut: take the short digest it suggests and the
        # whole one from the database
        found = re.search(r"--bundle ([0-9a-f]{8,64})\b", pushed)
        check(found is not None, "`ql3 cluster script push` printed no digest")
        assert found is not None
        rows = self.stage.rows("SELECT digest FROM script_bundles WHERE digest LIKE %s",
                               found.group(1) + "%")
        check(len(rows) == 1, f"no single bundle has the digest {found.group(1)}…: {rows}")
        digest = str(rows[0]["digest"])
        self.cli("task", "add", name, "--schedule", schedule, "--bundle", digest[:12],
                 "--entry-point", entry_point)
        return digest

    def on_both_workers(self) -> None:
        self.say.step("wait for scheduled runs to succeed on both workers")

        def workers() -> Counter[str]:
            return Counter(a["worker"] for a in self.stage.attempts()
                           if a["status"] == "succeeded")
        seen = wait_for(lambda: set(workers()) >= set(self.stage.workers), 40, 0.3)
        check(seen, f"runs succeeded only on {sorted(workers())} within 40 s")
        self.say.ok("runs succeeded on both workers: " + ", ".join(
            f"{n} on {w}" for w, n in sorted(workers().items())))
        self.cli("workers")
        self.cli("runs", "--limit", "6")

    def slow_run_started(self) -> tuple[str, str, set[int]]:
        self.say.step("run the slow task now (two background sleeps, about 6 s)")
        self.cli("run", "slow")

        def running() -> dict[str, Any] | None:
            rows = [a for a in self.stage.attempts("slow") if a["status"] == "running"]
            return rows[0] if rows and len(marked_pids(self.marker)) >= 3 else None
        attempt = wait_for(running, 30, 0.1)
        check(attempt, f"slow#1 did not start running with its 3 processes within 30 s: "
                       f"{self.stage.attempts('slow')}")
        pids = marked_pids(self.marker)
        self.say.ok(f"slow#1 runs on {attempt['worker']}: pids {sorted(pids)} (sh and two "
                    f"sleeps, found by the marker {self.marker} in /proc/*/cmdline)")
        return str(attempt["run_id"]), str(attempt["worker"]), pids

    def kill_worker(self, victim: str, pids: set[int]) -> None:
        proc = self.stage.workers[victim]
        self.say.step(f"SIGKILL worker {victim} (pid {proc.popen.pid}) while slow#1 runs on it")
        killed = time.monotonic()
        proc.kill()
        gone = wait_for(lambda: not (pids & marked_pids(self.marker)), KILL_GONE_S, 0.02)
        check(gone, f"slow#1's processes {sorted(pids & marked_pids(self.marker))} still "
                    f"alive {KILL_GONE_S:.0f} s after worker {victim}'s SIGKILL")
        self.say.ok(f"its processes are gone {time.monotonic() - killed:.1f} s after the kill")

    def kill_replica(self, survivor: str) -> Any:
        name = self.stage.prefers[survivor]
        proc = self.stage.controls[name]
        self.say.step(f"SIGKILL control replica {name} (pid {proc.popen.pid}), the one "
                      f"{survivor} talks to first")
        seen = len(self.stage.workers[survivor].log())
        proc.kill()
        self.cli.urls = self.stage.control_urls(first=name)
        self.say.ok(f"from now on ql3 cluster is given {self.cli.urls} ({name}, dead, first)")
        switched = wait_for(
            lambda: "switching to" in self.stage.workers[survivor].log()[seen:], 15, 0.2)
        check(switched, f"worker {survivor} did not move to the other replica within 15 s")
        self.say.ok(f"{survivor} moved to the other replica")
        return self.stage.rows("SELECT now() AS now")[0]["now"]  # the database's clock

    def retried(self, run_id: str, victim: str, survivor: str) -> None:
        self.say.step("wait for slow#1: attempt 1 lost (its lease expires), retried, succeeded")

        def ended() -> list[dict[str, Any]]:
            rows = [a for a in self.stage.attempts("slow") if a["run_id"] == run_id]
            return rows if rows and rows[-1]["run_status"] in FINISHED else []
        rows = wait_for(ended, 45, 0.3) or self.stage.attempts("slow")
        got = [(a["number"], a["status"], a["worker"]) for a in rows]
        check(rows and rows[-1]["run_status"] == "succeeded",
              f"slow#1 did not end succeeded within 45 s: attempts {got}")
        check(got == [(1, "lost", victim), (2, "succeeded", survivor)],
              f"slow#1's attempts are {got}, not [1 lost on {victim}, 2 succeeded on "
              f"{survivor}]")
        self.say.ok(f"attempt 1 lost on {victim}, attempt 2 succeeded on {survivor}")
        self.cli("inspect", "slow#1")

    def goes_on(self, survivor: str, since: Any) -> None:
        self.say.step("scheduled runs go on through the surviving replica")

        def fresh() -> list[dict[str, Any]]:
            return self.stage.rows(
                "SELECT t.name, r.number, i.name AS worker FROM runs r "
                "JOIN tasks t ON t.id = r.task_id JOIN attempts a ON a.run_id = r.id "
                "JOIN worker_incarnations i ON i.id = a.worker_incarnation_id "
                "WHERE r.status = 'succeeded' AND r.created_at > %s "
                "AND t.name IN ('hello', 'report')", since)
        rows = wait_for(fresh, 20, 0.3)
        check(rows, "no scheduled run created after the replica's SIGKILL succeeded in 20 s")
        check({r["worker"] for r in rows} == {survivor},
              f"runs after the kills ran on {sorted({r['worker'] for r in rows})}")
        self.say.ok(f"{len(rows)} runs created after the kills succeeded on {survivor}")
        self.cli("workers")

    def all_terminal(self) -> None:
        self.say.step("disable the schedules; every run must end")
        for name in ("hello", "report"):
            self.cli("task", "disable", name)
        ended = wait_for(lambda: not set(self.stage.run_statuses()) & set(ACTIVE), 30, 0.3)
        statuses = self.stage.run_statuses()
        check(ended, f"runs still active 30 s after the schedules were disabled: {statuses}")
        self.say.ok("every run is terminal: " + ", ".join(f"{n} {s}" for s, n in
                                                           sorted(statuses.items())))
        self.cli("runs", "--limit", "8")

    def logs(self) -> None:
        self.say.step("read the logs of sampled runs through `ql3 cluster logs`")
        for ref, text in (("hello@last", "hello from the cluster"),
                          ("report@last", "report: bundle files: ./lib/measure.sh ./report.sh"),
                          ("slow#1", "slow: done")):
            out = self.cli("logs", ref)
            check(text in out, f"`ql3 cluster logs {ref}` does not show {text!r}")
        self.say.ok("each sampled run's output was read back from S3")
        ran = {a["bundle_digest"] for a in self.stage.attempts("report")}
        check(ran == {self.digest}, f"report's attempts ran bundles {ran}, not {self.digest}")
        self.say.ok(f"every attempt of report ran the pushed bundle sha256:{self.digest[:12]}…")


def _interrupted(signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt(signum)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; the exit code (0 every check held, 1 one failed, 130 interrupted)."""
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    say = Narrator()
    signal.signal(signal.SIGTERM, _interrupted)
    # also when started with SIGINT ignored (a background job of a non-interactive shell
    # inherits that, and Python then installs no KeyboardInterrupt handler of its own)
    signal.signal(signal.SIGINT, _interrupted)
    stage: Stage | None = None
    stack = ExitStack()
    code = 0
    try:
        stage = Stage.start(stack, say.step)
        Story(stage, say).run()
        say.step("every check held")
    except KeyboardInterrupt:
        code = 130
        say.step("interrupted")
    except Exception as exc:  # a check that failed, a service that would not start, a bug
        code = 1
        named = isinstance(exc, CheckFailedError | StageError)
        say.step(f"FAILED: {exc}" if named else f"FAILED: {type(exc).__name__}: {exc}")
        if stage is not None:
            print(stage.log_tails(), flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # clean-up is not interrupted
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say.step("stop everything it started; drop the database; remove the temp dir")
        stack.close()
    say.step(f"elapsed {say.elapsed():.0f} s; exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
