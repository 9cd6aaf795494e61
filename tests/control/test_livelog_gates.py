"""The live-log rate gates of a replica (docs/protocols.md §4.9 "Rate and budget",
"Wake-ups"), on a fake clock: the byte budget that slows chatty workers, the one-NOTIFY-per-
attempt-per-100-ms gate, and the UTF-8 cut of a Server-Sent Event."""

from __future__ import annotations

from qinglong.control.api.log_live import _utf8_cut
from qinglong.control.livelog.append import ByteBudget, NotifyGate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_byte_budget_is_spent_by_a_burst_and_refills_with_time() -> None:
    clock = Clock()
    budget = ByteBudget(rate=1000, clock=clock)
    assert budget.take(600) and budget.take(400)  # the one-second burst
    assert not budget.take(1)  # spent: the answer asks for a slower flush
    clock.now += 0.5
    assert budget.take(400)  # 500 bytes came back in half a second
    assert not budget.take(200)


def test_one_notify_per_attempt_per_100_ms() -> None:
    clock = Clock()
    gate = NotifyGate(clock=clock)
    assert gate.due("a") and gate.due("b")  # attempts are independent
    assert not gate.due("a")
    clock.now += 0.06
    assert not gate.due("a") and abs(gate.wait_s("a") - 0.04) < 1e-9
    clock.now += 0.04
    assert gate.wait_s("a") == 0 and gate.due("a")


def test_a_character_cut_at_the_end_waits_for_its_rest() -> None:
    text = "中文".encode()
    assert _utf8_cut(text) == 6
    assert _utf8_cut(text[:5]) == 3 and _utf8_cut(text[:4]) == 3
    assert _utf8_cut(b"ab\xf0\x9f\x98") == 2 and _utf8_cut(b"ab\xf0\x9f\x98\x80") == 6
    assert _utf8_cut(b"\xad\xad") == 2  # continuation bytes with no lead: sent as they are
    assert _utf8_cut(b"\xff") == 1
