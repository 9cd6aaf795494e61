"""Units of worker isolation (docs/protocols.md §4.8): the uid pool's host-wide reservation
and round-robin, and the wrapper's isolation options contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong.worker.group_wrapper import Options
from qinglong.worker.isolation import IsolationError, UidPool


def test_two_pools_on_one_host_never_hand_out_the_same_uid(tmp_path: Path) -> None:
    """Two workers (two pools) share the flock directory: what one holds the other skips."""
    locks = tmp_path / "uids"
    first = UidPool(3_000_000_000, 3_000_000_003, locks)
    second = UidPool(3_000_000_000, 3_000_000_003, locks)
    taken = [first.take(), second.take(), first.take(), second.take()]
    assert len(set(taken)) == 4
    with pytest.raises(IsolationError, match="in use"):
        first.take()
    second.give_back(taken[1])
    assert first.take() == taken[1]


def test_a_returned_uid_is_the_last_to_be_reused(tmp_path: Path) -> None:
    pool = UidPool(3_000_000_100, 3_000_000_102, tmp_path / "uids")
    a = pool.take()
    pool.give_back(a)
    assert pool.take() != a


def test_an_unsafe_lock_directory_or_range_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(IsolationError, match="private"):
        UidPool(3_000_000_000, 3_000_000_010, shared)
    with pytest.raises(IsolationError, match="range"):
        UidPool(0, 10, tmp_path / "uids")


@pytest.mark.parametrize("args", [
    ["--uid", "0", "--gid", "5"],          # never root
    ["--uid", "5"],                        # a uid without its gid
    ["--userns"],                          # no directory of its own to keep
    ["--userns", "--keep", "relative"],
    ["--grace", "soon"],
    ["--unknown"],
])
def test_the_wrapper_refuses_options_outside_its_contract(args: list[str]) -> None:
    assert Options().parse(list(args)) is False


def test_the_wrapper_reads_its_isolation_options() -> None:
    opts = Options()
    assert opts.parse(["--uid", "7", "--gid", "7", "--userns", "--keep", "/a/b", "--hide",
                       "/a", "--hide", "/s", "--grace", "0.5"])
    assert (opts.uid, opts.gid, opts.userns, opts.keep, opts.hide, opts.grace_s) == (
        7, 7, True, "/a/b", ["/a", "/s"], 0.5)
