"""The startup refusal counts the runs left undecided and their active attempts, not the
ones the pass settled (issue 10 item 7; docs/protocols.md §3.4), on a real repository and files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from recovery_kit import Kit

from qinglong.shared.errors import LocalApplicationStartupRecoveryRequiredError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.statuses import RunStatus

GONE = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)


def test_refusal_counts_a_corrupt_handle_and_an_unreadable_shard_but_not_a_settled_run(
    kit: Kit, tmp_path: Path
) -> None:
    settled, _ = kit.left_running(GONE)
    corrupt, corrupt_attempt = kit.left_running(GONE)
    unreadable, attempt = kit.left_running(GONE)
    if kit.receipts.shard_path(attempt.id) in {
            kit.receipts.shard_path(a.id) for r in (settled, corrupt) for a in r.attempts}:
        pytest.skip("two attempts share a receipt shard (rarely): the scenario needs three")
    kit.db.write(lambda conn: conn.execute(
        "UPDATE attempts SET handle = 'ql3lp1:x' WHERE id = ?", (corrupt_attempt.id,)))
    os.rmdir(kit.receipts.shard_path(attempt.id))
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", kit.receipts.shard_path(attempt.id))
    result = kit.reconciler.reconcile()
    assert (result.lost, result.insufficient, result.errors) == (1, 1, 1)
    with pytest.raises(LocalApplicationStartupRecoveryRequiredError) as err:
        kit.reconciler.require_safe(result)
    assert (err.value.candidates, err.value.active_attempts) == (2, 2)
    assert "2 run(s) in dispatching/running with 2 active attempt(s)" in str(err.value)
    assert kit.repo.get_run(settled.id).status is RunStatus.LOST
    assert kit.repo.get_run(unreadable.id).status is RunStatus.RUNNING


def test_a_truncated_pass_that_settled_every_run_it_saw_still_counts_the_unseen_one(
    kit: Kit,
) -> None:
    for _ in range(257):
        kit.left_running(GONE)
    result = kit.reconciler.reconcile()
    assert result.truncated and result.lost == 256
    with pytest.raises(LocalApplicationStartupRecoveryRequiredError) as err:
        kit.reconciler.require_safe(result)
    assert err.value.candidates == 1 and err.value.truncated
    assert str(err.value).startswith("startup recovery required: 1 or more run(s)")
