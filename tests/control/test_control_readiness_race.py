"""Readiness while a release N+1 migrate commits (docs/operations.md §5 "Upgrades"): the
ledger and the runtime grants are read by two statements, each seeing the latest commit, so
a migrate that commits between them shows grants ahead of the ledger as first read. The
replica reads the ledger again before calling the grants invalid (``readiness.readiness``);
the rolling-upgrade drill saw a replica report ``runtime_role_invalid`` for one period."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from qinglong.control import readiness as module
from qinglong.control.readiness import Readiness


class _Engine:
    @contextmanager
    def begin(self) -> Iterator[None]:
        yield None


def _grants(_conn: Any, _role: str, *, schema_ahead: bool) -> list[str]:
    # release N+1's grants: valid only for a schema ahead of the code
    return [] if schema_ahead else ["worker_pools: UPDATE is granted and should not be"]


def test_grants_read_after_a_migrate_committed_are_checked_against_the_ledger_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ledgers = iter([Readiness(True), Readiness(True, ahead=("0018_expand",))])
    monkeypatch.setattr(module, "schema_readiness", lambda _conn: next(ledgers))
    monkeypatch.setattr(module, "runtime_role_problems", _grants)
    verdict = module.readiness(_Engine())  # type: ignore[arg-type]
    assert verdict.ready and verdict.ahead == ("0018_expand",), verdict


def test_grants_that_are_wrong_for_the_ledger_read_again_stay_invalid(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "schema_readiness", lambda _conn: Readiness(True))
    monkeypatch.setattr(module, "runtime_role_problems", _grants)
    verdict = module.readiness(_Engine())  # type: ignore[arg-type]
    assert not verdict.ready and verdict.reason == "runtime_role_invalid", verdict
