"""Completion receipt codec ``ql3-receipt@v1`` (docs/protocols.md §3.3, ADR-0069 §2).

A receipt is canonical JSON (sorted keys, no whitespace, ASCII), at most 4096 bytes. The
wrapper writes the same bytes without importing :mod:`json` (it must stay small); a unit test
holds the two encoders equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from qinglong.shared.errors import HandleCodecError, ReceiptCodecError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.ids import validate_uuid7

RECEIPT_FORMAT = "ql3-receipt@v1"
RECEIPT_MAX_BYTES = 4096
_KEYS = frozenset(
    {
        "attempt_id",
        "boot_id",
        "exit_code",
        "finished_at_ms",
        "format",
        "outcome",
        "pgid",
        "pid",
        "run_id",
        "signal",
        "start_ticks",
    }
)


class ReceiptOutcome(StrEnum):
    """What the wrapper saw: the user command exited, was killed by a signal, or never ran."""

    EXITED = "exited"
    SIGNALED = "signaled"
    NOT_STARTED = "not_started"


@dataclass(frozen=True, slots=True)
class CompletionReceipt:
    """A decoded receipt.

    ``exit_code`` is 0–255 for ``exited``; ``signal`` is 1–64 for ``signaled``; both are
    ``None`` for ``not_started``. ``finished_at_ms`` is Unix milliseconds.
    """

    run_id: str
    attempt_id: str
    handle: ProcessHandle
    outcome: ReceiptOutcome
    exit_code: int | None
    signal: int | None
    finished_at_ms: int

    def __post_init__(self) -> None:
        validate_uuid7(self.run_id, "run_id")
        validate_uuid7(self.attempt_id, "attempt_id")
        if type(self.finished_at_ms) is not int or not 0 <= self.finished_at_ms < 2**53:
            raise ReceiptCodecError("receipt finished_at_ms out of range")
        if not isinstance(self.outcome, ReceiptOutcome):
            raise ReceiptCodecError("receipt outcome must be a ReceiptOutcome")
        code, sig = self.exit_code, self.signal
        if self.outcome is ReceiptOutcome.EXITED:
            ok = type(code) is int and 0 <= code <= 255 and sig is None
        elif self.outcome is ReceiptOutcome.SIGNALED:
            ok = type(sig) is int and 1 <= sig <= 64 and code is None
        else:
            ok = code is None and sig is None
        if not ok:
            raise ReceiptCodecError("receipt exit code and signal do not fit its outcome")

    @property
    def wait_exit_code(self) -> int | None:
        """The exit code as a shell reports it: the code, or 128+N for signal N."""
        if self.outcome is ReceiptOutcome.EXITED:
            return self.exit_code
        if self.outcome is ReceiptOutcome.SIGNALED and self.signal is not None:
            return 128 + self.signal
        return None

    def encode(self) -> bytes:
        """Canonical bytes: sorted keys, ``,``/``:`` separators, ASCII only."""
        obj: dict[str, Any] = {
            "attempt_id": self.attempt_id,
            "boot_id": self.handle.boot_id,
            "exit_code": self.exit_code,
            "finished_at_ms": self.finished_at_ms,
            "format": RECEIPT_FORMAT,
            "outcome": self.outcome.value,
            "pgid": self.handle.pgid,
            "pid": self.handle.pid,
            "run_id": self.run_id,
            "signal": self.signal,
            "start_ticks": self.handle.start_ticks,
        }
        data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return data.encode("ascii")


def decode_receipt(data: bytes) -> CompletionReceipt:
    """Decode and validate receipt bytes; the input must be exactly the canonical encoding.

    Raises:
        ReceiptCodecError: empty, over 4096 bytes, not JSON, wrong keys or types, unknown
            format tag, or not canonical.
    """
    if not data:
        raise ReceiptCodecError("receipt is empty")
    if len(data) > RECEIPT_MAX_BYTES:
        raise ReceiptCodecError("receipt exceeds 4096 bytes")
    try:
        obj = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ReceiptCodecError("receipt is not ASCII JSON") from None
    if not isinstance(obj, dict) or set(obj) != _KEYS:
        raise ReceiptCodecError("receipt fields are not the ql3-receipt@v1 set")
    if obj["format"] != RECEIPT_FORMAT:
        raise ReceiptCodecError("unknown receipt format")
    try:
        outcome = ReceiptOutcome(obj["outcome"])
        handle = ProcessHandle(obj["boot_id"], obj["pid"], obj["pgid"], obj["start_ticks"])
        receipt = CompletionReceipt(
            run_id=obj["run_id"],
            attempt_id=obj["attempt_id"],
            handle=handle,
            outcome=outcome,
            exit_code=obj["exit_code"],
            signal=obj["signal"],
            finished_at_ms=obj["finished_at_ms"],
        )
    except (ValueError, TypeError, HandleCodecError) as exc:
        raise ReceiptCodecError("receipt field invalid") from exc
    if receipt.encode() != data:
        raise ReceiptCodecError("receipt is not in canonical form")
    return receipt
