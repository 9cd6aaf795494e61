"""Run references: the ways people name a run (issue 12 item 3).

``logs``, ``inspect`` and ``cancel`` accept, besides a full run id:

- ``TASK#N``: the run numbered N of the task named TASK (numbers count per task name, so a
  task removed and added again keeps its old runs' numbers; ``storage/run_numbers.py``);
- ``TASK@last``: the newest run of that task name;
- a unique suffix of the run id, at least 6 hex digits (``3f9c2a``, ``8b1e-12ab3f9c2a``).
  Never a prefix: a UUIDv7 starts with its creation time, shared by every run of the same
  minute, while it ends in random bits.

A reference that names no run, or a suffix that names several, is bad input: the command
exits 2 with one line naming what was asked (``no such run 'backup#99'``).
"""

from __future__ import annotations

import re

from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import NotFoundError, QinglongError, ValidationError

MIN_SUFFIX_HEX = 6
_NUMBERED = re.compile(r"(?P<task>[^#@\s]+)#(?P<number>[0-9]{1,9})")
_LAST = re.compile(r"(?P<task>[^#@\s]+)@last")
_FULL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SUFFIX = re.compile(r"[0-9a-f-]+")


class NoSuchRunError(ValidationError):
    """A run reference that names no run (exit 2). ``ref`` is what was asked."""

    code = "no_such_run"

    def __init__(self, ref: str, hint: str = "") -> None:
        QinglongError.__init__(self, f"no such run {ref!r}{hint}")
        self.field = "run"
        self.ref = ref


class AmbiguousRunError(ValidationError):
    """A run-id suffix shared by several runs (exit 2): give more digits or ``TASK#N``."""

    code = "ambiguous_run"

    def __init__(self, ref: str) -> None:
        QinglongError.__init__(
            self, f"run {ref!r} is ambiguous: several run ids end with it; give more digits "
                  "or use TASK#N")
        self.field = "run"
        self.ref = ref


def resolve_run_ref(repo: LocalRunRepository, ref: str) -> str:
    """The full id of the run ``ref`` names (see the module docstring for the forms).

    Raises:
        NoSuchRunError: no run matches (also an unknown task, a number never given, a suffix
            shorter than 6 hex digits, or text that is no reference at all).
        AmbiguousRunError: a suffix matches more than one run.
    """
    text = ref.strip()
    lowered = text.lower()
    if _FULL_ID.fullmatch(lowered):
        try:
            return repo.get_run(lowered).id
        except (NotFoundError, ValidationError):  # not a UUIDv7, or no such row
            raise NoSuchRunError(ref) from None
    if (numbered := _NUMBERED.fullmatch(text)) is not None:
        found = repo.run_ids_by_number(numbered["task"], int(numbered["number"]))
        if not found:
            raise NoSuchRunError(ref)
        if len(found) > 1:  # only a database numbered before 0005 by hand could do this
            raise AmbiguousRunError(ref)
        return found[0]
    if (last := _LAST.fullmatch(text)) is not None:
        newest = repo.last_run_id(last["task"])
        if newest is None:
            raise NoSuchRunError(ref, " (no task of that name has run)")
        return newest
    if _SUFFIX.fullmatch(lowered) and lowered.strip("-"):
        if sum(ch != "-" for ch in lowered) < MIN_SUFFIX_HEX:
            raise NoSuchRunError(ref, f" (a run-id suffix needs at least {MIN_SUFFIX_HEX} "
                                      "hex digits)")
        matches = repo.run_ids_by_suffix(lowered)
        if not matches:
            raise NoSuchRunError(ref)
        if len(matches) > 1:
            raise AmbiguousRunError(ref)
        return matches[0]
    raise NoSuchRunError(ref, " (use TASK#N, TASK@last, a run id or the last 6+ hex digits "
                              "of one)")
