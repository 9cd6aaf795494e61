"""Run notifications (issue 12 item 9): a command and/or a webhook called when a run ends.

Configured per data directory (:mod:`qinglong.local.app.settings`: ``notify_command``,
``notify_webhook``, ``notify_on``, ``notify_timeout_s``), read at each delivery.

* The command gets the environment a task gets (``PATH``, ``HOME``, ``LANG``, the global
  variables: push scripts find their tokens there) plus the run's facts as ``QL3_*``
  variables (:func:`fact_env`); its output is discarded (never in our logs); it runs in its
  own process group, and past the timeout the group gets TERM, then KILL one second later.
* Channel URLs (``notify_urls``: Bark, Telegram, WeCom, DingTalk, Feishu, PushPlus,
  ServerChan, Gotify, ntfy, email, webhooks) go through Apprise, the optional extra
  ``qinglong[notify]``, from the same child process, retried with the shared backoff within
  the channel's time (:mod:`qinglong.local.app.notify_child`).
* The webhook gets a JSON POST of the facts (:func:`run_facts`): never a secret, never the
  log body. It is sent by a child process (:mod:`qinglong.local.app.notify_child`, so an
  idle ``serve`` never loads ``ssl``: ADR-0069's memory gate), bounded as a whole.

One bounded queue and one worker thread in ``serve``: :meth:`Notifier.submit` never blocks
(a full queue drops the notification and logs that it did), so the scheduler and admission
never wait for a notifier. Each delivery is recorded as a run event ``notify_sent`` or
``notify_failed`` (channel, exit code or HTTP status, duration; no URL, no output). A
failing notifier never changes the run's status.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qinglong.local.app import settings as keys
from qinglong.local.app.views import iso
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Run
from qinglong.shared.errors import QinglongError
from qinglong.shared.statuses import RUN_TERMINAL

log = logging.getLogger(__name__)

QUEUE_MAX = 64
KILL_AFTER_TERM_S = 1.0
CHILD_MARGIN_S = 5.0
"""Seconds the notification child may take beyond its channels' own bounds (start-up)."""


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """``argv``/``webhook``: the channels (None: not configured); ``urls``: Apprise channel
    URLs (secrets); ``on``: statuses that notify; ``timeout_s``: the bound of each channel."""

    argv: tuple[str, ...] | None = None
    webhook: str | None = None
    on: frozenset[str] = frozenset(keys.NOTIFY_ON_DEFAULT)
    timeout_s: float = keys.NOTIFY_TIMEOUT_DEFAULT_S
    urls: tuple[str, ...] = ()

    @property
    def configured(self) -> bool:
        """True when at least one channel is set."""
        return self.argv is not None or self.webhook is not None or bool(self.urls)

    @staticmethod
    def load(get_setting: Callable[[str], str | None]) -> NotifyConfig:
        """Read the five settings (values stored by :func:`settings.normalise`)."""
        argv = get_setting(keys.NOTIFY_COMMAND)
        urls = get_setting(keys.NOTIFY_URLS)
        on = get_setting(keys.NOTIFY_ON)
        timeout = get_setting(keys.NOTIFY_TIMEOUT)
        return NotifyConfig(
            argv=None if argv is None else tuple(json.loads(argv)),
            webhook=get_setting(keys.NOTIFY_WEBHOOK),
            on=frozenset(keys.NOTIFY_ON_DEFAULT if on is None else on.split(",")),
            timeout_s=keys.NOTIFY_TIMEOUT_DEFAULT_S if timeout is None else float(timeout),
            urls=() if urls is None else tuple(json.loads(urls)),
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """One channel's outcome: ``channel`` ``command`` or ``webhook``; ``detail`` holds
    ``exit_code``, ``http_status``, ``error`` (a class of failure, no URL or output),
    ``timed_out``, ``duration_ms``."""

    channel: str
    ok: bool
    detail: dict[str, object] = field(default_factory=dict)

    def view(self) -> dict[str, object]:
        """JSON shape: ``{"channel", "ok", **detail}``."""
        return {"channel": self.channel, "ok": self.ok, **self.detail}

    def text(self) -> str:
        """For ``serve``'s log, as ``inspect`` shows the event: ``channel=command ok=no
        error=timed out timed_out=yes duration=2.003s`` (yes/no, never a Python repr)."""
        from qinglong.local.app.output import event_detail

        return event_detail(self.view())


def run_facts(run: Run, *, test: bool = False) -> dict[str, Any]:
    """What a notification says about a run (JSON-able; never a secret, a command line, an
    environment value or log output). Times ISO-8601 UTC; ``duration_s`` from the first
    attempt's start to the run's end (None if it never started)."""
    started = next((a.started_at_ms for a in run.attempts if a.started_at_ms), None)
    duration = None if started is None or run.finished_at_ms is None else round(
        (run.finished_at_ms - started) / 1000, 3)
    status = run.status.value
    how = f"exit {run.exit_code}" if run.exit_code is not None else "no exit code"
    if run.signal is not None:
        how = f"signal {run.signal}"
    return {
        "kind": "ql3.test" if test else "ql3.run_finished",
        "host": os.uname().nodename,
        "task": run.task_name,
        "task_id": run.task_id,
        "run_id": run.id,
        "status": status,
        "trigger": run.trigger.value,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "attempts": len(run.attempts),
        "scheduled_at": iso(run.scheduled_at_ms),
        "finished_at": iso(run.finished_at_ms),
        "duration_s": duration,
        "message": f"{'[test] ' if test else ''}ql3: task {run.task_name} {status} ({how})",
    }


def sample_run(now_ms: int) -> Run:
    """A made-up failed run for ``ql3 local notify test`` (task ``ql3-notify-test``)."""
    from qinglong.shared.domain import Attempt, Trigger
    from qinglong.shared.ids import uuid7
    from qinglong.shared.statuses import AttemptStatus, Executor, RunOwner, RunStatus

    run_id = uuid7()
    attempt = Attempt(id=uuid7(), run_id=run_id, number=1, status=AttemptStatus.FAILED,
                      executor=Executor.LOCAL_PROCESS, version=1, exit_code=1,
                      started_at_ms=now_ms - 1500, finished_at_ms=now_ms)
    return Run(id=run_id, task_id=uuid7(), task_name="ql3-notify-test",
               status=RunStatus.FAILED, owner=RunOwner.RUNTIME, trigger=Trigger.MANUAL,
               version=1, scheduled_at_ms=None, not_before_ms=now_ms - 2000,
               created_at_ms=now_ms - 2000, finished_at_ms=now_ms, exit_code=1,
               attempts=(attempt,))


def fact_env(facts: dict[str, Any]) -> dict[str, str]:
    """The facts as ``QL3_<KEY>`` variables (None becomes an empty string)."""
    return {f"QL3_{k.upper()}": "" if v is None else str(v) for k, v in facts.items()}


def run_command(argv: tuple[str, ...], env: dict[str, str], cwd: str,
                timeout_s: float) -> Delivery:
    """Run the notify command in a new process group, output discarded, at most
    ``timeout_s`` seconds (then TERM to the group, KILL one second later)."""
    began = time.monotonic()
    try:
        proc = subprocess.Popen(  # the user's own configured command
            list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return Delivery("command", False, {"error": f"cannot start: {exc.strerror or exc}"})
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return Delivery("command", False, {"error": "timed out", "timed_out": True,
                                           "duration_ms": _ms_since(began)})
    detail: dict[str, object] = {"exit_code": code, "duration_ms": _ms_since(began)}
    if code != 0:
        detail["error"] = f"exited {code}"
    return Delivery("command", code == 0, detail)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    if pgid <= 1:  # never signal group 0/1 (docs/protocols.md §3.2)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_AFTER_TERM_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)  # the group may outlive its leader
    proc.wait()


def send_in_child(request: dict[str, Any], channels: tuple[str, ...],
                  bound_s: float) -> list[Delivery]:
    """Run :mod:`qinglong.local.app.notify_child` with ``request`` on its stdin, in its own
    process group, for at most ``bound_s`` seconds (then the group gets TERM, KILL one second
    later); its outcomes, or one failed :class:`Delivery` per name in ``channels`` when it
    timed out, could not start or answered nonsense. Never raises for a child's failure."""
    began = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "qinglong.local.app.notify_child"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return [Delivery(c, False, {"error": f"cannot start: {exc.strerror or exc}"})
                for c in channels]
    try:
        out, _ = proc.communicate(json.dumps(request).encode(), timeout=bound_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return [Delivery(c, False, {"error": "timed out", "timed_out": True,
                                    "duration_ms": _ms_since(began)}) for c in channels]
    try:
        views = json.loads(out)
        return [Delivery(str(v.pop("channel")), bool(v.pop("ok")), v) for v in views]
    except (ValueError, TypeError, KeyError, AttributeError):
        return [Delivery(c, False, {"error": f"notifier exited {proc.returncode}"})
                for c in channels]


def _ms_since(began: float) -> int:
    return round((time.monotonic() - began) * 1000)


class Notifier:
    """The bounded queue and its one worker thread.

    ``env_source()``: the environment of the notify command before the facts (the task
    environment: base and global variables); ``cwd``: where it runs.
    """

    def __init__(self, repo: LocalRunRepository, env_source: Callable[[], dict[str, str]],
                 cwd: str, *, queue_max: int = QUEUE_MAX) -> None:
        self.repo = repo
        self.env_source = env_source
        self.cwd = cwd
        self._queue: queue.Queue[Run | None] = queue.Queue(queue_max)
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def submit(self, run: Run) -> bool:
        """Queue a terminal run for notification without blocking; False when the run is
        not terminal or the queue is full (then dropped, and logged by run id)."""
        if run.status not in RUN_TERMINAL:
            return False
        try:
            self._queue.put_nowait(run)
        except queue.Full:
            self.dropped += 1
            log.warning("notification queue full: run %s not notified", run.id)
            return False
        return True

    def start(self) -> None:
        """Start the worker (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="ql3-notifier", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Let the worker finish what is queued, waiting at most ``timeout_s`` (idempotent,
        callable without start)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout_s)
        thread.join(timeout_s)

    def _work(self) -> None:
        while (run := self._queue.get()) is not None:
            try:
                self.deliver(run)
            except Exception:  # the worker survives any one notification
                log.exception("notification for run %s failed", run.id)

    def config(self) -> NotifyConfig:
        """The current settings."""
        return NotifyConfig.load(self.repo.get_setting)

    def deliver(self, run: Run) -> list[Delivery]:
        """Notify about ``run`` if its status is in ``notify_on``; record each channel's
        outcome as a run event. Never raises for a channel's failure."""
        config = self.config()
        if not config.configured or run.status.value not in config.on:
            return []
        deliveries = self.send(config, run_facts(run))
        for done in deliveries:
            kind = "notify_sent" if done.ok else "notify_failed"
            (log.info if done.ok else log.warning)(
                "run %s of task %s: %s %s", run.id, run.task_name, kind, done.text())
            try:
                self.repo.run_event(run.task_id, run.id, kind, done.view())
            except QinglongError as exc:
                log.error("could not record the notification of run %s: %s", run.id, exc.code)
        return deliveries

    def send(self, config: NotifyConfig, facts: dict[str, Any]) -> list[Delivery]:
        """Call each configured channel once with ``facts``, each bounded by the timeout."""
        out: list[Delivery] = []
        if config.argv is not None:
            env = {**self.env_source(), **fact_env(facts)}
            out.append(run_command(config.argv, env, self.cwd, config.timeout_s))
        if config.webhook is not None or config.urls:  # ssl loads in the child, never serve
            request = {"facts": facts, "webhook": config.webhook, "urls": list(config.urls),
                       "timeout_s": config.timeout_s}
            channels = (*(["webhook"] if config.webhook else []),
                        *(keys.channel_target(u).partition(":")[0] for u in config.urls))
            out.extend(send_in_child(request, channels, config.timeout_s + CHILD_MARGIN_S))
        return out


def describe(config: NotifyConfig) -> str:
    """One line naming the channels (the webhook by host only)."""
    parts = []
    if config.argv is not None:
        parts.append(f"command {shlex.join(config.argv)}")
    if config.webhook is not None:
        parts.append(f"webhook {keys.mask_url(config.webhook)}")
    parts.extend(keys.channel_target(u) for u in config.urls)
    return ", ".join(parts) or "no notifier configured"
