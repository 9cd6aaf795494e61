"""Run references of ``ql3 local`` (issue 12 item 3): the forms (``TASK#N``, ``TASK@last``, a
unique id suffix of 6+ hex digits, a full id) are parsed by ``qinglong.shared.run_refs``;
here they are looked up in the local store. Numbers count per task name, so a task removed
and added again keeps its old runs' numbers (``storage/run_numbers.py``).

A reference that names no run, or a suffix that names several, is bad input: the command
exits 2 with one line naming what was asked (``no such run 'backup#99'``).
"""

from __future__ import annotations

from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import NotFoundError, ValidationError
from qinglong.shared.run_refs import (
    MIN_SUFFIX_HEX,
    AmbiguousRunError,
    NoSuchRunError,
    parse_run_ref,
)

__all__ = ["MIN_SUFFIX_HEX", "AmbiguousRunError", "NoSuchRunError", "resolve_run_ref"]


def resolve_run_ref(repo: LocalRunRepository, ref: str) -> str:
    """The full id of the run ``ref`` names (see ``qinglong.shared.run_refs`` for the forms).

    Raises:
        NoSuchRunError: no run matches (also an unknown task, a number never given, a suffix
            shorter than 6 hex digits, or text that is no reference at all).
        AmbiguousRunError: a suffix matches more than one run.
    """
    parsed = parse_run_ref(ref)
    if parsed.kind == "id":
        try:
            return repo.get_run(parsed.value).id
        except (NotFoundError, ValidationError):  # not a UUIDv7, or no such row
            raise NoSuchRunError(ref) from None
    if parsed.kind == "number":
        found = repo.run_ids_by_number(parsed.task, parsed.number)
        if not found:
            raise NoSuchRunError(ref)
        if len(found) > 1:  # only a database numbered before 0005 by hand could do this
            raise AmbiguousRunError(ref)
        return found[0]
    if parsed.kind == "last":
        newest = repo.last_run_id(parsed.task)
        if newest is None:
            raise NoSuchRunError(ref, " (no task of that name has run)")
        return newest
    matches = repo.run_ids_by_suffix(parsed.value)
    if not matches:
        raise NoSuchRunError(ref)
    if len(matches) > 1:
        raise AmbiguousRunError(ref)
    return matches[0]
