"""Is a live process the wrapper launched for this attempt? (issue 10 item 7, docs/protocols.md
§3.4)

A stored handle names a process by boot id, pid, start time and group; a corrupted or copied
row can name a live process that is not this attempt's wrapper, and then nothing may be
signalled through it. The wrapper is started with ``QL3_LAUNCH_ATTEMPT_ID=<attempt id>`` in
its environment (``wrapper.pyw``'s launch contract); ``/proc/<pid>/environ`` keeps the
environment a process was started with, whatever it later removes, so it tells the wrapper
of this attempt from any other process — also while the wrapper is still starting and has
not taken its attempt lock yet.
"""

from __future__ import annotations

# wrapper.pyw's literal (a test pins them equal): the wrapper is a script run from a memfd,
# never imported, and shipped under a name pip does not byte-compile (docs/protocols.md §3.2)
ENV_ATTEMPT_ID = "QL3_LAUNCH_ATTEMPT_ID"

MAX_ENVIRON_BYTES = 1 << 20


def is_wrapper_of(pid: int, attempt_id: str) -> bool | None:
    """True if process ``pid`` was started as the wrapper of ``attempt_id``; False if it was
    not; None if that cannot be told (gone, or its environment cannot be read: another
    user's process). Reads at most 1 MiB of ``/proc/<pid>/environ``; raises nothing."""
    if pid <= 1:
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read(MAX_ENVIRON_BYTES)
    except OSError:
        return None
    return f"{ENV_ATTEMPT_ID}={attempt_id}".encode() in data.split(b"\0")
