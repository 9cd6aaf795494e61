"""``cancel`` means cancel (issue 12 item 6, docs/protocols.md §3.8).

Through the owner (``serve`` or a foreground ``run``) the owner's coordinator stops the run;
the command says "cancel requested" and, with ``--wait``, waits for the run to end.

With no owner running, the command becomes the owner for as long as it takes: it records
the durable cancel intent, then runs the same receipt-first recovery that ``serve`` runs at
start. That re-attaches the run's wrapper by its durable handle, after checking its
identity (boot id, pid, start time, group; a pidfd pins it), and the cancel intent makes the
monitor stop it: TERM to the wrapper (which forwards it to its group), the grace period,
KILL to the group while its leader is still the attempt's wrapper, never a group id <= 1;
then what escaped the group but holds the attempt lock is stopped too. The outcome is
recorded from the receipt as ``serve`` would. When the facts do not allow it (recovery
needs a decision, the run is still active after the bound), it raises, so the command
exits non-zero saying why: never exit 0 while the task keeps running.
"""

from __future__ import annotations

import time
from typing import Any

from qinglong.local.app.application import LocalStack
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.output import TERMINAL
from qinglong.local.app.store import LocalStore
from qinglong.shared.errors import (
    LocalApplicationStartupRecoveryRequiredError,
    QinglongError,
)
from qinglong.shared.process.leftovers import KILL_ROUNDS, KILL_WAIT_S

POLL_S = 0.1
SETTLE_MARGIN_S = 15.0  # beyond grace + KILL rounds: the monitor's commit and cleanup


class CancelNotDoneError(QinglongError):
    """The cancel intent is recorded but the run could not be stopped here (the message
    says why and what to do)."""

    code = "cancel_not_done"


def cancel_without_owner(
    datadir: DataDir, run_id: str, say: Any, *, resume: bool = False
) -> dict[str, Any]:
    """Own ``datadir`` (DataDirectoryBusyError if someone else does), cancel ``run_id``
    and stop its process group; returns the run's final view.

    A queued run is cancelled at once. An active one is stopped through its re-attached
    wrapper (TERM, grace, KILL). Raises CancelNotDoneError when the run cannot be stopped
    or is still active after ``grace + KILL rounds + 15 s``; ConflictError or
    NotFoundError from the store (already finished, no such run) as they are.
    ``resume``: the cancel was already requested through an owner that has gone since; a
    run that ended meanwhile is returned as it ended.
    """
    store = LocalStore(datadir, "cancel")
    stack: LocalStack | None = None
    try:
        stack = LocalStack(store)
        service = stack.service()
        view = service.run_get(run_id) if resume else {"status": None}
        if view["status"] not in TERMINAL:
            view = service.cancel(run_id)  # the durable intent first: a crash still ends it
        if view["status"] in TERMINAL:
            return view
        grace = stack.coordinator.config.grace_s
        say(f"no owner is running: stopping run {view['id']} here (TERM, then KILL after "
            f"{grace:g} s)")
        try:
            stack.recover()  # re-attaches the wrapper; the cancel intent stops it
        except LocalApplicationStartupRecoveryRequiredError as exc:
            raise CancelNotDoneError(
                f"cancel recorded, but the run was not stopped: {exc}; see "
                "`ql3 local recovery status --verbose`"
            ) from None
        deadline = time.monotonic() + grace + KILL_ROUNDS * KILL_WAIT_S + SETTLE_MARGIN_S
        while True:
            view = service.run_get(run_id)
            if view["status"] in TERMINAL:
                return view
            if time.monotonic() >= deadline:
                raise CancelNotDoneError(
                    f"cancel recorded, but the run is still {view['status']} after TERM and "
                    "KILL; see `ql3 local recovery status --verbose`"
                )
            time.sleep(POLL_S)
    finally:
        if stack is not None:
            stack.coordinator.detach(5.0)  # other re-attached runs go on; serve takes them
        store.close()
