"""Bounded disk: log retirement and run history retention (issue 3 item 6; docs/protocols.md §3.8).

Each tick does bounded work, serially, on the one repository:

1. finish tombstones a crash left unfinished (unlink, mark done);
2. retire the logs of terminal attempts whose ``finished_at`` is older than their task's
   ``log_retention_days`` (the profile default when NULL): durable tombstones FIRST (one
   transaction), then unlink each file (the path comes from the attempt row: no directory
   scan), then mark the tombstones done;
3. prune one batch of terminal runs (with attempts, events, tombstones) older than the
   history retention, keeping each task's newest runs, never orphaning a journal row or a
   log file; and one batch of old task-level events.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from qinglong.local.process.log_cap import LAYOUT_SUFFIX as LOG_LAYOUT_SUFFIX
from qinglong.local.process.paths import check_absolute, open_dir_chain, open_root
from qinglong.local.recovery.lifecycle import PeriodicLifecycle
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.local.storage.retention import DAY_MS, MAX_RETENTION_BATCH
from qinglong.shared.errors import ValidationError

log = logging.getLogger(__name__)

REASON_RETENTION = "retention"
KEEP_LAST_RUNS = 20
FIRST_TICK_MAX_S = 60.0


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """Bounds of retention.

    ``log_root``: absolute root every retired log must be inside. ``log_retention_days``:
    default for tasks whose own is NULL (edge 7, standalone 30). ``history_retention_days``:
    terminal runs older than this are pruned (edge 30, standalone 90). ``keep_last_runs``:
    newest runs per task never pruned. ``batch``: at most this many logs retired and this
    many runs pruned per tick (1–1000). ``clock``: Unix ms; None uses the repository's.
    """

    log_root: str
    log_retention_days: int
    history_retention_days: int
    keep_last_runs: int = KEEP_LAST_RUNS
    batch: int = 200
    clock: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        check_absolute(self.log_root, "log_root")
        if self.log_retention_days < 1 or self.history_retention_days < 1:
            raise ValueError("retention days must be >= 1")
        if self.keep_last_runs < 1 or not 1 <= self.batch <= MAX_RETENTION_BATCH:
            raise ValueError("keep_last_runs must be >= 1 and batch 1-1000")


@dataclass(slots=True)
class RetentionResult:
    """One tick: logs ``retired`` (file unlinked) or ``already_gone`` (tombstone done, no
    file), ``runs_pruned``/``events_pruned`` (task-level events), ``failed`` items."""

    retired: int = 0
    already_gone: int = 0
    runs_pruned: int = 0
    events_pruned: int = 0
    failed: int = 0


def unlink_log(log_root: str, path: str) -> bool:
    """Unlink ``path`` (strictly inside ``log_root``) and its ``.layout`` (a log past its
    cap, docs/protocols.md §3.3), walking every directory with
    ``O_NOFOLLOW`` (a symlinked directory is refused; a symlinked file is removed as the
    link). Returns False when it did not exist.

    Raises ValidationError (outside the root), UnsafePathError, OSError.
    """
    check_absolute(path, "log_path")
    relative = os.path.relpath(path, log_root)
    parts = relative.split("/")
    if relative.startswith("..") or relative == "." or any(p in ("", ".", "..") for p in parts):
        raise ValidationError("log_path", "must be inside the log root")
    try:
        root_fd = open_root(log_root, create=False)
    except FileNotFoundError:
        return False
    try:
        dir_fd = open_dir_chain(root_fd, parts[:-1], create=False)
    except FileNotFoundError:
        return False
    finally:
        os.close(root_fd)
    try:
        with contextlib.suppress(FileNotFoundError):  # a capped log's layout goes with it
            os.unlink(parts[-1] + LOG_LAYOUT_SUFFIX, dir_fd=dir_fd)
        os.unlink(parts[-1], dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dir_fd)
    return True


class LocalRetention:
    """The retention job over one repository (see the module docstring)."""

    def __init__(self, repo: LocalRunRepository, config: RetentionConfig) -> None:
        self.repo = repo
        self.config = config
        self._clock = config.clock or repo.clock

    def run_tick(self, should_stop: Callable[[], bool] = lambda: False) -> RetentionResult:
        """One bounded tick: finish, retire, prune. Item failures are counted, not raised;
        a storage failure of a whole step is counted once and the next step still runs."""
        result = RetentionResult()
        for step in (self._finish_unfinished, self._retire_logs, self._prune):
            if should_stop():
                break
            try:
                step(result, should_stop)
            except Exception as exc:
                log.warning("retention: a step failed (%s)", getattr(exc, "code", "error"))
                result.failed += 1
        return result

    def _unlink_all(
        self, items: list[tuple[str, str]], result: RetentionResult,
        should_stop: Callable[[], bool],
    ) -> list[str]:
        """Unlink each ``(attempt_id, path)``; return the attempt ids now without a file."""
        done: list[str] = []
        for attempt_id, path in items:
            if should_stop():
                break
            try:
                removed = unlink_log(self.config.log_root, path)
            except Exception as exc:  # one file's failure only counts; its tombstone stays
                log.warning("retention: a log unlink failed (%s)", type(exc).__name__)
                result.failed += 1
                continue
            if removed:
                result.retired += 1
            else:
                result.already_gone += 1
            done.append(attempt_id)
        return done

    def _finish_unfinished(self, result: RetentionResult, should_stop: Callable[[], bool]) -> None:
        stale = self.repo.unfinished_tombstones(self.config.batch)
        done = self._unlink_all([(t.attempt_id, t.log_path) for t in stale], result, should_stop)
        self.repo.finish_tombstones(done, self._clock())

    def _retire_logs(self, result: RetentionResult, should_stop: Callable[[], bool]) -> None:
        now = self._clock()
        candidates = self.repo.log_retirement_candidates(
            now, self.config.log_retention_days, self.config.batch
        )
        if not candidates:
            return
        self.repo.write_tombstones(candidates, now, REASON_RETENTION)  # durable, BEFORE unlink
        done = self._unlink_all(
            [(c.attempt_id, c.log_path) for c in candidates], result, should_stop
        )
        self.repo.finish_tombstones(done, self._clock())

    def _prune(self, result: RetentionResult, should_stop: Callable[[], bool]) -> None:
        cutoff = self._clock() - self.config.history_retention_days * DAY_MS
        pruned = self.repo.prune_history(cutoff, self.config.keep_last_runs, self.config.batch)
        result.runs_pruned += pruned.runs
        if not should_stop():
            result.events_pruned += self.repo.prune_task_events(cutoff, self.config.batch)


class RetentionLifecycle(PeriodicLifecycle[RetentionResult]):
    """The retention timer: one bounded :meth:`LocalRetention.run_tick` per tick; the
    first tick comes at most a minute after start, so frequent restarts cannot starve it."""

    def __init__(
        self,
        retention: LocalRetention,
        *,
        tick_s: float,
        stop_wait_s: float,
        name: str = "ql3-retention",
    ) -> None:
        super().__init__(name, self._tick, tick_s=tick_s, stop_wait_s=stop_wait_s,
                         first_delay_s=min(tick_s, FIRST_TICK_MAX_S))
        self.retention = retention
        self.last: RetentionResult | None = None

    def _tick(self, should_stop: Callable[[], bool]) -> RetentionResult:
        result = self.retention.run_tick(should_stop)
        self.last = result
        if result.retired or result.already_gone or result.runs_pruned or result.failed:
            log.info("retention: %d log(s) retired, %d already gone, %d run(s) and %d task "
                     "event(s) pruned, %d failed", result.retired, result.already_gone,
                     result.runs_pruned, result.events_pruned, result.failed)
        return result
