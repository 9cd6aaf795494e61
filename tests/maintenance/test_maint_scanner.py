"""The receipt cleanup scanner rules (ADR-0069 §4, docs/protocols.md §3.5) on real SQLite and
files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from maint_kit import Kit

from qinglong.local.recovery import quarantine as quarantine_module
from qinglong.local.recovery.cleanup_scanner import (
    LocalCompletionReceiptCleanupScanner,
    Outcome,
    ScannerConfig,
)
from qinglong.local.recovery.quarantine import quarantine_path, quarantine_receipt
from qinglong.shared.statuses import AttemptStatus

HOUR_MS = 3_600_000


def scanner(
    kit: Kit, page: int = 8, retention_s: int = 3600
) -> LocalCompletionReceiptCleanupScanner:
    config = ScannerConfig(page_size=page, missing_receipt_retention_s=retention_s)
    return LocalCompletionReceiptCleanupScanner(kit.repo, kit.receipts, config)


@pytest.mark.parametrize("status", [AttemptStatus.CLAIMED, AttemptStatus.STARTING,
                                    AttemptStatus.RUNNING])
def test_an_active_attempt_is_kept_and_its_receipt_untouched(
    kit: Kit, status: AttemptStatus
) -> None:
    made = kit.attempt(status)
    path = kit.write_receipt(made)
    kit.clock.advance(30 * 24 * HOUR_MS)  # however old
    result = scanner(kit).run_page(None)
    assert result.count(Outcome.KEPT) == 1 and result.failed == 0
    assert os.path.exists(path)
    assert kit.journal() == {made.attempt.id: "pending"}


def test_a_terminal_attempt_loses_exactly_its_receipt_then_its_row_then_its_lock(kit: Kit) -> None:
    done = kit.attempt(AttemptStatus.FAILED)
    active = kit.attempt(AttemptStatus.RUNNING)
    receipt = kit.write_receipt(done)
    lock = kit.write_lock(done)
    other = kit.write_receipt(active)
    result = scanner(kit).run_page(None)
    assert result.count(Outcome.DELETED) == 1 and result.count(Outcome.KEPT) == 1
    assert not os.path.exists(receipt) and not os.path.exists(lock)
    assert os.path.exists(other), "only the exact receipt of the terminal attempt goes"
    assert kit.journal() == {active.attempt.id: "pending"}


def test_a_held_attempt_lock_survives_the_cleanup(kit: Kit) -> None:
    import fcntl

    made = kit.attempt(AttemptStatus.SUCCEEDED)
    kit.write_receipt(made)
    lock = kit.write_lock(made)
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # an escaped process still holds it
        assert scanner(kit).run_page(None).count(Outcome.DELETED) == 1
        assert os.path.exists(lock)
    finally:
        os.close(fd)
    assert kit.journal() == {}


def test_a_missing_receipt_is_resolved_only_after_the_retention(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.LOST)
    s = scanner(kit, retention_s=3600)
    assert s.run_page(None).count(Outcome.WAITING) == 1
    kit.clock.advance(HOUR_MS - 1)
    assert s.run_page(None).count(Outcome.WAITING) == 1
    assert kit.journal() == {made.attempt.id: "pending"}
    kit.clock.advance(1)
    assert s.run_page(None).count(Outcome.RESOLVED_MISSING) == 1
    assert kit.journal() == {}


def test_the_retention_counts_from_the_terminal_commit_when_it_is_later(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.RUNNING)  # registered at T0
    kit.clock.advance(5 * HOUR_MS)  # ran for five hours
    kit.repo.finish_attempt(made.attempt, AttemptStatus.LOST)
    s = scanner(kit, retention_s=3600)
    kit.clock.advance(HOUR_MS // 2)
    assert s.run_page(None).count(Outcome.WAITING) == 1
    kit.clock.advance(HOUR_MS // 2)
    assert s.run_page(None).count(Outcome.RESOLVED_MISSING) == 1


def test_a_quarantine_waits_until_due_then_is_purged_and_resolved(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.FAILED)
    kit.write_receipt(made, b"{not json")
    target = quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id,
                                purge_after_ms=HOUR_MS)
    assert target == quarantine_path(kit.receipts, made.attempt.id)
    assert os.path.exists(target)
    assert not os.path.exists(kit.receipts.receipt_path(made.attempt.id))
    s = scanner(kit)
    assert s.run_page(None).count(Outcome.WAITING) == 1
    assert os.path.exists(target)
    kit.clock.advance(HOUR_MS)
    assert s.run_page(None).count(Outcome.PURGED) == 1
    assert not os.path.exists(target)
    assert kit.journal() == {}


def test_the_quarantine_intent_is_durable_before_the_move(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the intent and the move: the scanner finishes the move, then purges."""
    made = kit.attempt(AttemptStatus.FAILED)
    receipt = kit.write_receipt(made, b"x" * 5000)  # > 4096 bytes
    seen: list[dict[str, str]] = []

    def crash(store: object, attempt_id: str) -> bool:
        seen.append(kit.journal())  # what is on disk when the move would begin
        raise OSError(5, "crash before the move")

    monkeypatch.setattr(quarantine_module, "finish_quarantine_move", crash)
    with pytest.raises(OSError):
        quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id,
                           purge_after_ms=HOUR_MS)
    monkeypatch.undo()
    assert seen == [{made.attempt.id: "quarantined"}], "intent committed before the move"
    assert os.path.exists(receipt), "the move never happened"
    kit.clock.advance(HOUR_MS)
    result = scanner(kit).run_page(None)
    assert result.count(Outcome.PURGED) == 1 and result.failed == 0
    assert not os.path.exists(receipt)
    assert not os.path.exists(quarantine_path(kit.receipts, made.attempt.id))
    assert kit.journal() == {}


def test_finishing_a_quarantine_is_idempotent_after_a_crash_before_the_resolve(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.FAILED)
    kit.write_receipt(made, b"")  # 0 bytes
    quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id, purge_after_ms=0)
    os.unlink(quarantine_path(kit.receipts, made.attempt.id))  # purged, then "crashed"
    assert scanner(kit).run_page(None).count(Outcome.PURGED) == 1
    assert kit.journal() == {}


def test_a_symlinked_receipt_is_quarantined_and_purged_as_the_link(
    kit: Kit, tmp_path: Path
) -> None:
    made = kit.attempt(AttemptStatus.FAILED)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    kit.receipts.prepare_shard(made.attempt.id)
    os.symlink(victim, kit.receipts.receipt_path(made.attempt.id))
    quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id, purge_after_ms=0)
    assert os.path.islink(quarantine_path(kit.receipts, made.attempt.id))
    assert scanner(kit).run_page(None).count(Outcome.PURGED) == 1
    assert victim.read_text() == "keep me"
    assert not os.path.lexists(quarantine_path(kit.receipts, made.attempt.id))


def test_a_quarantined_row_of_an_active_attempt_is_kept(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.RUNNING)
    kit.write_receipt(made, b"{}")
    quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id, purge_after_ms=0)
    kit.clock.advance(HOUR_MS)
    assert scanner(kit).run_page(None).count(Outcome.KEPT) == 1
    assert os.path.exists(quarantine_path(kit.receipts, made.attempt.id))


def test_resolve_journal_leaves_a_quarantined_row_for_the_scanner(kit: Kit) -> None:
    """Settling code resolves after deleting a receipt; a quarantined file must stay indexed."""
    made = kit.attempt(AttemptStatus.FAILED)
    kit.write_receipt(made, b"{}")
    quarantine_receipt(kit.repo, kit.receipts, made.run.id, made.attempt.id, purge_after_ms=0)
    assert kit.repo.resolve_journal(made.attempt.id) is False
    assert kit.journal() == {made.attempt.id: "quarantined"}


def test_one_item_failure_only_counts_and_the_page_goes_on(kit: Kit) -> None:
    bad = kit.attempt(AttemptStatus.FAILED)
    good = kit.attempt(AttemptStatus.SUCCEEDED)
    kit.receipts.prepare_shard(bad.attempt.id)
    os.mkdir(kit.receipts.receipt_path(bad.attempt.id))  # unlink fails: a directory
    good_receipt = kit.write_receipt(good)
    result = scanner(kit).run_page(None)
    assert result.failed == 1 and result.count(Outcome.DELETED) == 1 and result.seen == 2
    assert not os.path.exists(good_receipt)
    assert kit.journal() == {bad.attempt.id: "pending"}, "the failed row stays for later"


def test_a_row_naming_a_foreign_path_is_refused_and_counted(kit: Kit, tmp_path: Path) -> None:
    made = kit.attempt(AttemptStatus.FAILED, register=False)
    outside = tmp_path / "outside.receipt"
    outside.write_text("x")
    kit.repo.register(made.run.id, made.attempt.id, str(outside))
    result = scanner(kit).run_page(None)
    assert result.failed == 1
    assert outside.exists()
    assert kit.journal() == {made.attempt.id: "pending"}


def test_a_page_read_failure_is_reported_not_raised(kit: Kit) -> None:
    s = scanner(kit)
    kit.db.close()
    result = s.run_page((1, "x"))
    assert result.read_failed and result.failed == 1 and result.cursor == (1, "x")


def test_keyset_pages_follow_the_cursor_and_say_when_they_are_truncated(kit: Kit) -> None:
    made = []
    for _ in range(5):
        made.append(kit.attempt(AttemptStatus.RUNNING))
        kit.clock.advance(1)
    expected = [(m.attempt.created_at_ms, m.attempt.id) for m in made]
    s = scanner(kit, page=2)
    seen: list[tuple[int, str]] = []
    cursor = None
    flags = []
    while True:
        result = s.run_page(cursor)
        page_rows = kit.repo.journal_page(cursor, 2).rows
        seen.extend(r.position for r in page_rows)
        flags.append(result.truncated)
        cursor = result.cursor
        if not result.truncated:
            break
    assert flags == [True, True, False]
    assert seen == expected, "ordered by (updated_at_ms, attempt_id), no repeats, no gaps"
    assert cursor == expected[-1]
    assert kit.repo.journal_page(cursor, 2) == ((), False)


def test_keyset_ties_on_updated_at_are_broken_by_attempt_id(kit: Kit) -> None:
    ids = sorted(kit.attempt(AttemptStatus.RUNNING).attempt.id for _ in range(3))
    first = kit.repo.journal_page(None, 1)
    assert first.truncated and first.rows[0].attempt_id == ids[0]
    rest = kit.repo.journal_page(first.rows[0].position, 64)
    assert [r.attempt_id for r in rest.rows] == ids[1:] and not rest.truncated
    assert {r.attempt_status for r in rest.rows} == {AttemptStatus.RUNNING}


def test_the_page_is_hard_capped_at_64(kit: Kit) -> None:
    with pytest.raises(ValueError, match="1-64"):
        ScannerConfig(page_size=65, missing_receipt_retention_s=0)
    with pytest.raises(ValueError, match="1-64"):
        kit.repo.journal_page(None, 65)
    assert LocalCompletionReceiptCleanupScanner.Config is ScannerConfig


def test_the_page_query_uses_the_journal_index(kit: Kit) -> None:
    from qinglong.local.storage import journal

    order = " ORDER BY j.updated_at_ms, j.attempt_id LIMIT 9"
    queries = [
        (journal._PAGE_SQL + order, ()),
        (journal._PAGE_SQL + " WHERE (j.updated_at_ms, j.attempt_id) > (?, ?)" + order, (1, "x")),
    ]
    for sql, args in queries:
        plan = kit.db.read(lambda c, q=sql, a=args: c.execute("EXPLAIN QUERY PLAN " + q, a)
                           .fetchall())
        text = " ".join(str(row[3]) for row in plan)
        assert "local_completion_receipt_journal_page" in text
        assert "TEMP B-TREE" not in text, "no sort: the index gives the order"


def test_a_lock_held_past_the_retention_keeps_the_row_until_it_frees(kit: Kit) -> None:
    import fcntl
    import subprocess

    made = kit.attempt(AttemptStatus.SUCCEEDED)
    path = kit.write_lock(made)
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    holder = subprocess.Popen(["sleep", "30"], pass_fds=(fd,))  # an escaped process
    os.close(fd)
    s = scanner(kit, retention_s=0)
    try:
        assert s.run_page(None).count(Outcome.WAITING) == 1
        assert kit.journal() == {made.attempt.id: "pending"}
        assert os.path.exists(path)
    finally:
        holder.kill()
        holder.wait()
    assert s.run_page(None).count(Outcome.RESOLVED_MISSING) == 1
    assert kit.journal() == {}
    assert not os.path.exists(path)  # the lock file goes with the row
