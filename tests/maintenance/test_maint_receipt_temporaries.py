"""The wrapper's leftover temporary receipt goes under the cleanup journal's rules (issue 10
item 7; docs/protocols.md §3.3, §3.5): by its exact derived name ``.<attempt_id>.receipt.tmp``, when
the journal row of the terminal attempt is resolved, never by a directory listing."""

from __future__ import annotations

import os

from maint_kit import Kit, Made

from qinglong.local.recovery.cleanup_scanner import (
    LocalCompletionReceiptCleanupScanner,
    Outcome,
    ScannerConfig,
)
from qinglong.local.recovery.quarantine import quarantine_receipt
from qinglong.shared.statuses import AttemptStatus

HOUR_MS = 3_600_000


def scanner(kit: Kit) -> LocalCompletionReceiptCleanupScanner:
    config = ScannerConfig(page_size=8, missing_receipt_retention_s=3600)
    return LocalCompletionReceiptCleanupScanner(kit.repo, kit.receipts, config)


def leave_temporary(kit: Kit, made: Made) -> str:
    """A real temporary receipt as a wrapper killed while publishing leaves it."""
    kit.receipts.prepare_shard(made.attempt.id)
    shard = kit.receipts.shard_path(made.attempt.id)
    path = os.path.join(shard, f".{made.attempt.id}.receipt.tmp")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b'{"format":"ql3-receipt@v1"')  # half written
    os.close(fd)
    return path


def test_a_temporary_left_after_the_link_goes_with_the_receipt_of_a_terminal_attempt(
    kit: Kit,
) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED)
    receipt = kit.write_receipt(made)
    temp = leave_temporary(kit, made)
    result = scanner(kit).run_page(None)
    assert result.count(Outcome.DELETED) == 1 and result.failed == 0
    assert not os.path.exists(receipt)
    assert not os.path.exists(temp)
    assert kit.journal() == {}


def test_a_temporary_left_before_the_link_stays_until_the_missing_receipt_row_is_resolved(
    kit: Kit,
) -> None:
    made = kit.attempt(AttemptStatus.LOST)
    temp = leave_temporary(kit, made)
    s = scanner(kit)
    assert s.run_page(None).count(Outcome.WAITING) == 1
    assert os.path.exists(temp), "kept while the row waits for its receipt"
    kit.clock.advance(HOUR_MS)
    assert s.run_page(None).count(Outcome.RESOLVED_MISSING) == 1
    assert not os.path.exists(temp)
    assert kit.journal() == {}


def test_a_temporary_goes_when_a_due_quarantine_is_purged(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.FAILED)
    kit.write_receipt(made, b"{not json")
    temp = leave_temporary(kit, made)
    quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id,
                       purge_after_ms=HOUR_MS)
    kit.clock.advance(HOUR_MS)
    assert scanner(kit).run_page(None).count(Outcome.PURGED) == 1
    assert not os.path.exists(temp)
    assert kit.journal() == {}


def test_the_temporary_of_an_active_attempt_is_left_alone(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.RUNNING)
    temp = leave_temporary(kit, made)
    kit.clock.advance(30 * 24 * HOUR_MS)
    assert scanner(kit).run_page(None).count(Outcome.KEPT) == 1
    assert os.path.exists(temp), "a live wrapper may be publishing through it"


def test_only_the_exact_derived_name_is_removed(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED)
    kit.write_receipt(made)
    shard = kit.receipts.shard_path(made.attempt.id)
    neighbours = [os.path.join(shard, name) for name in (
        f".{made.attempt.id}.4242.17.tmp", f".{made.attempt.id}.receipt.tmp.bak", "other.tmp")]
    for path in neighbours:
        with open(path, "wb") as fh:
            fh.write(b"x")
    leave_temporary(kit, made)
    assert scanner(kit).run_page(None).count(Outcome.DELETED) == 1
    assert all(os.path.exists(p) for p in neighbours), "no listing, no pattern: one name"
