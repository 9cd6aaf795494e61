"""The durable local process handle ``ql3lp1:<boot_id>:<pid>:<pgid>:<start_ticks>``.

docs/protocols.md §3.2 step 6 / ADR-0069 §2 step 6: a handle names one process incarnation on one
boot, so a reused pid or a reboot can never be mistaken for the process we started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qinglong.shared.errors import HandleCodecError

HANDLE_PREFIX = "ql3lp1"
PID_MAX = 4_194_304  # Linux PID_MAX_LIMIT on 64-bit
_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UINT = re.compile(r"0|[1-9][0-9]{0,19}")


@dataclass(frozen=True, slots=True)
class ProcessHandle:
    """Exact identity of a wrapper process: boot id, pid, process group id, start ticks.

    ``start_ticks`` is field 22 of ``/proc/<pid>/stat`` (clock ticks since boot).
    The wrapper leads its own group, so ``pgid == pid`` for handles this runtime creates,
    but the codec does not assume it.
    """

    boot_id: str
    pid: int
    pgid: int
    start_ticks: int

    def __post_init__(self) -> None:
        if not isinstance(self.boot_id, str) or not _BOOT_ID.fullmatch(self.boot_id):
            raise HandleCodecError("handle boot id must be a lowercase UUID")
        for name, value, low in (("pid", self.pid, 2), ("pgid", self.pgid, 2)):
            if type(value) is not int or not low <= value <= PID_MAX:
                raise HandleCodecError(f"handle {name} out of range")
        if type(self.start_ticks) is not int or not 0 <= self.start_ticks < 2**64:
            raise HandleCodecError("handle start ticks out of range")

    def encode(self) -> str:
        """Return the canonical handle string."""
        return f"{HANDLE_PREFIX}:{self.boot_id}:{self.pid}:{self.pgid}:{self.start_ticks}"

    @classmethod
    def decode(cls, text: object) -> ProcessHandle:
        """Parse a handle string strictly (no sign, no leading zero, no extra field).

        Raises:
            HandleCodecError: anything but the exact canonical form.
        """
        if not isinstance(text, str) or len(text) > 128:
            raise HandleCodecError("handle must be a short string")
        parts = text.split(":")
        if len(parts) != 5 or parts[0] != HANDLE_PREFIX:
            raise HandleCodecError("handle must be ql3lp1:<boot_id>:<pid>:<pgid>:<start_ticks>")
        for number in parts[2:]:
            if not _UINT.fullmatch(number):
                raise HandleCodecError("handle numbers must be plain decimal")
        return cls(parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
