"""The receipt cleanup journal scanner (ADR-0069 §3–§4, §6; docs/protocols.md §3.5).

It consumes database candidates only: one keyset page of ``local_completion_receipt_journal``
ordered by ``(updated_at_ms, attempt_id)``, handled item by item, serially:

- the attempt is active (claimed/starting/running): keep the row;
- ``pending`` and the attempt is terminal: delete exactly that receipt (and the wrapper's
  leftover temporary file, by its derived name), resolve the row, then discard the lock;
- ``pending``, terminal, the receipt already gone: resolve only once the missing-receipt
  retention has passed (counted from the later of the row's ``updated_at_ms`` and the
  attempt's terminal commit);
- ``quarantined`` and due (``purge_at_ms <= now``): finish the move idempotently, purge the
  quarantined file, resolve, discard the attempt lock.

Whenever a row of a terminal attempt is resolved, the wrapper's temporary receipt
``.<attempt_id>.receipt.tmp`` (left by a wrapper killed while publishing) is unlinked first,
by that exact name (issue 10 item 7).

One item's failure only increments a counter. No directory is ever listed, nothing recurses,
no pool, no second connection: every file is named by the attempt id.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from qinglong.local.process.paths import open_child_dir, open_root
from qinglong.local.process.receipt_store import RECEIPT_SUFFIX, ReceiptStore
from qinglong.local.recovery.quarantine import (
    QUARANTINE_DIR,
    finish_quarantine_move,
    quarantine_path,
)
from qinglong.local.storage.journal import MAX_JOURNAL_PAGE, JournalEntry, Position
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import QinglongError
from qinglong.shared.ids import validate_uuid7
from qinglong.shared.statuses import ATTEMPT_ACTIVE

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScannerConfig:
    """Bounds of the scanner.

    ``page_size``: rows per page, 1–64 (ADR-0069 §6 hard cap; edge 8, standalone 32).
    ``missing_receipt_retention_s``: seconds a terminal attempt's row waits for a receipt
    that is not there before it is resolved (edge 24 h, standalone 1 h).
    ``clock``: Unix milliseconds; None uses the repository's clock.
    """

    page_size: int
    missing_receipt_retention_s: int
    clock: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        if type(self.page_size) is not int or not 1 <= self.page_size <= MAX_JOURNAL_PAGE:
            raise ValueError("page_size must be 1-64")
        if self.missing_receipt_retention_s < 0:
            raise ValueError("missing_receipt_retention_s must be >= 0")


class Outcome(Enum):
    """What the scanner did with one journal row."""

    KEPT = "kept"  # active attempt
    WAITING = "waiting"  # receipt missing within retention, or quarantine not yet due
    DELETED = "deleted"  # receipt deleted, row resolved
    RESOLVED_MISSING = "resolved_missing"  # receipt missing past retention, row resolved
    PURGED = "purged"  # quarantined file purged, row resolved


@dataclass(slots=True)
class PageResult:
    """One page: ``cursor`` is the last position seen (the input cursor if none was);
    ``truncated`` when rows after it remain for this pass (the next page continues from
    ``cursor``); ``counts`` by outcome; ``failed`` items whose handling raised (their rows
    stay); ``read_failed`` when the page itself could not be read; ``interrupted`` when a
    stop request ended the page early."""

    cursor: Position | None
    truncated: bool = False
    seen: int = 0
    failed: int = 0
    read_failed: bool = False
    interrupted: bool = False
    counts: dict[Outcome, int] = field(default_factory=dict)

    def count(self, outcome: Outcome) -> int:
        """How many rows ended with ``outcome``."""
        return self.counts.get(outcome, 0)


class _RefusedError(QinglongError):
    """A row names a path this store would not produce: never touched, counted."""

    code = "cleanup_refused"


class LocalCompletionReceiptCleanupScanner:
    """Reads one journal page at a time and settles what the facts allow (module doc).

    ``repo`` is the one repository (one connection); ``receipts`` the receipt store whose
    deterministic paths every row must match. Thread-compatible: one caller at a time (the
    cleanup lifecycle guarantees it).
    """

    Config = ScannerConfig

    def __init__(
        self, repo: LocalRunRepository, receipts: ReceiptStore, config: ScannerConfig
    ) -> None:
        self.repo = repo
        self.receipts = receipts
        self.config = config
        self._clock = config.clock or repo.clock

    def run_page(
        self, cursor: Position | None, should_stop: Callable[[], bool] | None = None
    ) -> PageResult:
        """Read and handle one page after ``cursor`` (None: from the beginning).

        ADR-0069 §4: one indexed range query, then each row serially. Never raises: a page
        read failure sets ``read_failed``, an item failure increments ``failed``.
        ``should_stop()`` is checked between items (a stop ends the page early).
        """
        now = self._clock()
        result = PageResult(cursor=cursor)
        try:
            page = self.repo.journal_page(cursor, self.config.page_size)
        except Exception as exc:  # the lifecycle survives; the store is the truth
            log.warning("receipt cleanup: page read failed (%s)", _code(exc))
            result.failed, result.read_failed = 1, True
            return result
        counts = result.counts
        for entry in page.rows:
            if should_stop is not None and should_stop():
                result.interrupted = True
                break
            result.seen += 1
            try:
                outcome = self._handle(entry, now)
            except Exception as exc:  # ADR-0069 §4: one item's failure only counts
                log.warning("receipt cleanup: an item failed (%s)", _code(exc))
                result.failed += 1
            else:
                counts[outcome] = counts.get(outcome, 0) + 1
            result.cursor = entry.position
        result.truncated = page.truncated or result.interrupted
        return result

    # -- one row --------------------------------------------------------------------------

    def _handle(self, entry: JournalEntry, now: int) -> Outcome:
        attempt_id = entry.attempt_id
        if entry.attempt_status in ATTEMPT_ACTIVE:
            return Outcome.KEPT  # ADR-0069 §4: active attempts are kept
        if entry.state == "quarantined":
            if entry.purge_at_ms is None or entry.purge_at_ms > now:
                return Outcome.WAITING
            if entry.quarantine_path != quarantine_path(self.receipts, attempt_id):
                raise _RefusedError("quarantine path is not the deterministic one")
            finish_quarantine_move(self.receipts, attempt_id)  # idempotent
            purge_quarantined(self.receipts, attempt_id)
            self.receipts.discard_temporary(attempt_id)
            self.repo.resolve_quarantined(attempt_id, now)
            self.receipts.discard_lock(attempt_id)
            return Outcome.PURGED
        if entry.receipt_path != self.receipts.receipt_path(attempt_id):
            raise _RefusedError("receipt path is not the deterministic one")
        if self.receipts.delete(attempt_id):  # exactly that receipt (and its temp), resolve
            self.repo.resolve_journal(attempt_id)
            self.receipts.discard_lock(attempt_id)
            return Outcome.DELETED
        since = max(entry.updated_at_ms, entry.attempt_updated_at_ms)
        if now - since < self.config.missing_receipt_retention_s * 1000:
            return Outcome.WAITING
        if self.receipts.lock_held(attempt_id):
            return Outcome.WAITING  # a process of the attempt still lives: keep its lock file
        self.receipts.discard_temporary(attempt_id)
        self.repo.resolve_journal(attempt_id)
        self.receipts.discard_lock(attempt_id)
        return Outcome.RESOLVED_MISSING


def purge_quarantined(store: ReceiptStore, attempt_id: str) -> bool:
    """Unlink ``<receipt root>/quarantine/<attempt id>.receipt`` (never following a symlink;
    an empty directory planted there is removed, a non-empty one is an OSError: nothing
    recurses). Returns False when it was already gone. Raises UnsafePathError or OSError."""
    name = validate_uuid7(attempt_id, "attempt_id") + RECEIPT_SUFFIX
    try:
        root_fd = open_root(store.root, create=False)
    except FileNotFoundError:
        return False
    try:
        try:
            dir_fd = open_child_dir(root_fd, QUARANTINE_DIR, create=False)
        except FileNotFoundError:
            return False
    finally:
        os.close(root_fd)
    try:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.EPERM):
                raise
            os.rmdir(name, dir_fd=dir_fd)
        os.fsync(dir_fd)
        return True
    finally:
        os.close(dir_fd)


def _code(exc: BaseException) -> str:
    """A low-sensitivity name of an error: its code, errno name or class, never its text."""
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, type(exc).__name__)
    return type(exc).__name__
