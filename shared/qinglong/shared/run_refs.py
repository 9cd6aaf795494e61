"""Run references: the ways people name a run (issue 12 item 3), shared by ``ql3 local`` and
``ql3 cluster`` (and control's ``GET /v1/runs/resolve``).

Besides a full run id, a reference is:

- ``TASK#N``: the run numbered N of the task named TASK;
- ``TASK@last``: the newest run of that task name;
- a unique suffix of the run id, at least 6 hex digits (``3f9c2a``, ``8b1e-12ab3f9c2a``).
  Never a prefix: a UUIDv7 starts with its creation time, shared by every run of the same
  minute, while it ends in random bits.

:func:`parse_run_ref` only reads the text; each profile looks the run up in its own store.
A reference that names no run, or a suffix that names several, is bad input: the command
exits 2 with one line naming what was asked (``no such run 'backup#99'``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from qinglong.shared.errors import QinglongError, ValidationError

MIN_SUFFIX_HEX = 6
_NUMBERED = re.compile(r"(?P<task>[^#@]+)#(?P<number>[0-9]{1,9})")
_LAST = re.compile(r"(?P<task>[^#@]+)@last")
_FULL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_SUFFIX = re.compile(r"[0-9a-f-]+")
FORMS_HINT = " (use TASK#N, TASK@last, a run id or the last 6+ hex digits of one)"


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


@dataclass(frozen=True, slots=True)
class RunRef:
    """A parsed reference. ``kind``: ``id`` (``value`` the full lowercase id), ``number``
    (``task`` and ``number``), ``last`` (``task``) or ``suffix`` (``value`` the lowercase
    suffix, dashes kept). Fields a kind does not use stay empty."""

    kind: Literal["id", "number", "last", "suffix"]
    task: str = ""
    number: int = 0
    value: str = ""


def parse_run_ref(ref: str) -> RunRef:
    """What ``ref`` asks for (see the module docstring for the forms).

    Raises:
        NoSuchRunError: text that is no reference at all, or a suffix shorter than 6 hex
            digits (the message says which forms exist).
    """
    text = ref.strip()
    lowered = text.lower()
    if _FULL_ID.fullmatch(lowered):
        return RunRef("id", value=lowered)
    if (numbered := _NUMBERED.fullmatch(text)) is not None:
        return RunRef("number", task=numbered["task"], number=int(numbered["number"]))
    if (last := _LAST.fullmatch(text)) is not None:
        return RunRef("last", task=last["task"])
    if _SUFFIX.fullmatch(lowered) and lowered.strip("-"):
        if sum(ch != "-" for ch in lowered) < MIN_SUFFIX_HEX:
            raise NoSuchRunError(ref, f" (a run-id suffix needs at least {MIN_SUFFIX_HEX} "
                                      "hex digits)")
        return RunRef("suffix", value=lowered)
    raise NoSuchRunError(ref, FORMS_HINT)
