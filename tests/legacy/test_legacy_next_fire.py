"""An import's effect on stored next fire times (issue 10 item 1, migration 0004): imported
crons wait pending and the scheduler computes them in bounded batches; @boot/@once and
disabled imports store none; a re-import changes nothing already computed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from legacy_dbkit import build_install

from qinglong.local.app.legacy_import import import_qinglong
from qinglong.local.scheduling.scheduler import Scheduler
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[LocalRunRepository]:
    db = open_database(str(tmp_path / "ql3.db"))
    yield LocalRunRepository(db, clock=lambda: T0)
    db.close()


def test_imported_crons_get_next_fire_times_from_the_first_ticks_and_boot_ones_none(
    tmp_path: Path, repo: LocalRunRepository
) -> None:
    install = build_install(tmp_path / "ql", "2.21")
    import_qinglong(repo, str(install.db), timezone="UTC")
    tasks = {t.name: t for t in repo.list_tasks()}
    assert {repo.next_fire_of(t.id) for t in tasks.values()} == {(None, "new")}

    Scheduler(repo, lambda run_id: None).tick(T0)
    fires = {name: repo.next_fire_of(t.id) for name, t in tasks.items()}
    assert fires["京东签到"] == (T0 + 5 * 60_000, None)  # "0 5 8 * * *": 08:05:00 UTC today
    assert fires["Boot job"] == (None, None) and fires["manual"] == (None, None)
    assert fires["disabled"][0] is None  # imported disabled: never computed, never due
    assert fires["timeout"] == (T0 + 5 * 60_000, None)  # "*/5 * * * *"
    assert repo.earliest_next_fire() == T0 + 5 * 60_000

    import_qinglong(repo, str(install.db), timezone="UTC")  # idempotent re-import
    assert {name: repo.next_fire_of(t.id) for name, t in tasks.items()} == fires
