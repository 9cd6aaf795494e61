"""Making the next test's throwaway database while the current test runs, on one background
thread.

A test's clone of the migrated template (``CREATE DATABASE … TEMPLATE``, its own roles and
grants: 0.3–1 s on a two-core machine, more under load) does not depend on anything the test
before it did, so it need not wait for that test: ``Ahead.take`` hands over the copy made
while the previous test ran and starts making the next one. Nothing about the copy changes:
it is made by the same code, from the same template, and used by one test only.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class Ahead(Generic[T]):
    """``make()`` one item ahead on a background thread.

    ``take()`` returns the item made ahead (waiting for it if it is still being made; the
    first call makes one here) and starts making the next. A ``make`` that failed ahead is
    run again in ``take``, so its error, if it persists, is the test's. ``close()`` waits
    for the item in the making and hands it to ``discard`` (unused: nobody took it)."""

    def __init__(self, make: Callable[[], T], discard: Callable[[T], None]) -> None:
        self._make, self._discard = make, discard
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pg-ahead")
        self._next: Future[T] | None = None

    def take(self) -> T:
        ahead, self._next = self._next, None
        try:
            item = ahead.result() if ahead is not None else self._make()
        except Exception:  # made ahead and failed: once more, here, for the test to see
            item = self._make()
        self._next = self._pool.submit(self._make)
        return item

    def close(self) -> None:
        ahead, self._next = self._next, None
        try:
            if ahead is not None:
                try:
                    item = ahead.result()
                except Exception:  # nothing was made, nothing to discard
                    return
                self._discard(item)
        finally:
            self._pool.shutdown(wait=True)
