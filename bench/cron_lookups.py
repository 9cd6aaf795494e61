"""Microseconds per cron lookup (qinglong.shared.cron; docs/protocols.md §3.7, issue 10 item 2).

For a daily job (``30 2 * * *``), an every-second job (``* * * * * *``) and an every-5-minutes
job (``*/5 * * * *``) in America/New_York, at an ordinary instant and inside the repeated hour
of 2024-11-03: ``next_slot_after`` and ``latest_slot_at_or_before`` per call,
``slots_between`` per slot (1,000 slots) and ``due`` after 400 days of downtime (ms; counting
stops at SKIP_COUNT_CAP). Croniter does most of the work in each figure.
Usage: python bench/cron_lookups.py [CALLS]
"""

from __future__ import annotations

import itertools
import sys
import timeit

from qinglong.shared.cron import parse_schedule

ORDINARY_MS = 1_730_000_000_000  # 2024-10-27T03:33:20Z
REPEATED_HOUR_MS = 1_730_615_400_000  # 2024-11-03T06:30Z = 01:30 EST, the second pass
DAY_MS = 86_400_000


def per_call_us(fn: object, calls: int) -> float:
    assert callable(fn)
    return min(timeit.repeat(fn, number=calls, repeat=3)) / calls * 1e6


def main(calls: int) -> None:
    instants = {"ordinary": ORDINARY_MS, "repeated hour": REPEATED_HOUR_MS}
    for cron in ("30 2 * * *", "* * * * * *", "*/5 * * * *"):
        schedule = parse_schedule(cron, "America/New_York")
        for label, t in instants.items():
            nxt = per_call_us(lambda: schedule.next_slot_after(t), calls)  # noqa: B023
            latest = per_call_us(lambda: schedule.latest_slot_at_or_before(t), calls)  # noqa: B023
            walk = per_call_us(
                lambda: list(itertools.islice(schedule.slots_between(t, t + 10**13), 1000)),  # noqa: B023
                1,
            ) / 1000
            due_ms = per_call_us(lambda: schedule.due(t, t + 400 * DAY_MS, 60_000), 3) / 1000  # noqa: B023
            print(
                f"{cron:>13} {label:>13}: next {nxt:6.1f} us  latest {latest:6.1f} us  "
                f"walk {walk:5.1f} us/slot  due after 400 d {due_ms:5.1f} ms"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
