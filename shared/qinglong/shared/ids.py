"""UUIDv7 identifiers (RFC 9562), generated time-ordered and validated on every boundary."""

from __future__ import annotations

import os
import threading
import time
import uuid

from qinglong.shared.errors import InvalidIdentifierError


class _Clock:
    """Last (millisecond, counter) handed out, so ids of one process never go backwards."""

    lock = threading.Lock()
    last_ms = 0
    last_seq = 0


def uuid7() -> str:
    """Return a new UUIDv7 as a lowercase 36-character string.

    48 bits of Unix milliseconds, then a 12-bit counter (monotonic within one millisecond in
    this process) and 62 random bits, so ids made here sort by creation order.
    """
    with _Clock.lock:
        ms = int(time.time() * 1000)
        if ms <= _Clock.last_ms:
            ms = _Clock.last_ms
            _Clock.last_seq += 1
            if _Clock.last_seq > 0xFFF:
                ms += 1
                _Clock.last_seq = 0
        else:
            _Clock.last_seq = int.from_bytes(os.urandom(2), "big") & 0x3FF
        _Clock.last_ms = ms
        seq = _Clock.last_seq
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= seq << 64
    value |= 0b10 << 62
    value |= rand
    return str(uuid.UUID(int=value))


def validate_uuid7(value: object, field: str = "id") -> str:
    """Return ``value`` if it is a canonical lowercase UUIDv7 string.

    Raises:
        InvalidIdentifierError: not a string, not canonical form, version != 7 or variant != 10.
    """
    if not isinstance(value, str) or len(value) != 36:
        raise InvalidIdentifierError(field, "must be a UUIDv7 string")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise InvalidIdentifierError(field, "must be a UUIDv7 string") from None
    if str(parsed) != value:
        raise InvalidIdentifierError(field, "must be canonical lowercase UUID text")
    if parsed.version != 7 or (parsed.int >> 62) & 0b11 != 0b10:
        raise InvalidIdentifierError(field, "must be a UUIDv7 (version 7, variant 10)")
    return value


def uuid7_time_ms(value: str) -> int:
    """Return the Unix milliseconds embedded in a valid UUIDv7."""
    return uuid.UUID(validate_uuid7(value)).int >> 80
