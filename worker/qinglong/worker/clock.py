"""The worker's one clock for deadlines: ``CLOCK_BOOTTIME`` (seconds).

A lease expires on the database's clock, which keeps running while this host is suspended;
``CLOCK_MONOTONIC`` stops then, so a fence measured on it could pass after the lease did and
the attempt would overlap its retry (docs/protocols.md §4.2 self-fencing). ``CLOCK_BOOTTIME`` is
monotonic and counts suspended time. Every deadline of the worker (self-fencing, heartbeats,
request retries, drain, the wrapper's fence) is a reading of this clock.
"""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on ``CLOCK_BOOTTIME`` (Linux)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)
