"""Background probes of the failover drill, each a bounded thread stopped by ``stop()``:

- ``AckedWriter`` commits numbered rows through the multi-host conninfo and remembers which
  commits were acknowledged (the verdict later requires every one of them on the new
  leader: ``synchronous_mode`` loses no acknowledged commit);
- ``ReadinessWatch`` polls every control replica's ``/readyz`` (status by wall-clock time);
- ``ProcessSampler`` reads the process table: which live processes hold an attempt's lock
  file ``<spool>/<attempt id>.lock`` (every process of an attempt holds it,
  docs/protocols.md §4.2), stamped with the wall-clock time taken before the scan.

All times are ``time.time()`` on this host: the database's ``now()`` is this host's clock
too (every PostgreSQL member runs here), so they compare directly with the database's
timestamps. Imported as a plain module (no pytest).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

_LOCK = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.lock$")


class _Loop:
    """A daemon thread calling ``step`` every ``period_s`` until ``stop()``."""

    period_s = 0.2

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=type(self).__name__)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.period_s)

    def step(self) -> None:
        raise NotImplementedError


class AckedWriter(_Loop):
    """Inserts 1, 2, 3, … into ``drill_acks`` (one autocommit INSERT each) at ``url``;
    ``acked`` holds the numbers whose commit returned. A failed statement or connection is
    dropped and reconnected on the next step (libpq's ``target_session_attrs`` then finds
    the leader). ``acked``: (number, wall time after the commit returned); ``errors``
    counts failures by exception type."""

    period_s = 0.05

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url
        self._conn: psycopg.Connection[Any] | None = None
        self._next = 1
        self.acked: list[tuple[int, float]] = []
        self.errors: dict[str, int] = {}
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE drill_acks (n bigint PRIMARY KEY,"
                         " at timestamptz NOT NULL DEFAULT clock_timestamp())")

    def step(self) -> None:
        try:
            if self._conn is None:
                self._conn = psycopg.connect(self._url, autocommit=True)
            self._conn.execute("INSERT INTO drill_acks (n) VALUES (%s)", (self._next,))
        except psycopg.Error as exc:
            name = type(exc).__name__
            self.errors[name] = self.errors.get(name, 0) + 1
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._next += 1  # the outcome of that number is unknown: never reuse it
            return
        self.acked.append((self._next, time.time()))
        self._next += 1

    def stop(self) -> None:
        super().stop()
        if self._conn is not None:
            self._conn.close()

    def outage(self, since: float) -> float | None:
        """Seconds from ``since`` to the first acknowledged commit after it (None if none):
        how long writes were impossible."""
        return next((at - since for _, at in self.acked if at > since), None)

    def lost(self) -> list[int]:
        """Acknowledged numbers missing from the table now (read at the leader)."""
        with psycopg.connect(self._url, autocommit=True) as conn:
            present = {r[0] for r in conn.execute("SELECT n FROM drill_acks").fetchall()}
        return [n for n, _ in self.acked if n not in present]


class ReadinessWatch(_Loop):
    """Polls ``/readyz`` of each named control URL; ``seen[name]`` is a list of
    (wall time before the request, HTTP status or 0 when unanswered)."""

    def __init__(self, urls: dict[str, str]) -> None:
        super().__init__()
        self._urls = urls
        self._client = httpx.Client(timeout=2)
        self.seen: dict[str, list[tuple[float, int]]] = {name: [] for name in urls}

    def step(self) -> None:
        for name, url in self._urls.items():
            at = time.time()
            try:
                status = self._client.get(f"{url}/readyz").status_code
            except httpx.HTTPError:
                status = 0
            self.seen[name].append((at, status))

    def stop(self) -> None:
        super().stop()
        self._client.close()

    def outage(self, name: str, since: float) -> tuple[float | None, float | None]:
        """For ``name`` after wall time ``since``: when ``/readyz`` first answered other
        than 200, and when it first answered 200 after that (None when not seen)."""
        down = up = None
        for at, status in self.seen[name]:
            if at < since:
                continue
            if down is None and status != 200:
                down = at
            elif down is not None and status == 200:
                up = at
                break
        return down, up


class ProcessSampler(_Loop):
    """Samples which processes hold an attempt's lock under ``spool_dirs`` (the workers'
    spool directories), leaving out ``exclude`` (the worker processes themselves, which hold
    the lock while they supervise). ``samples``: (wall time before the scan,
    {pid: attempt id})."""

    period_s = 0.25

    def __init__(self, spool_dirs: list[Path], exclude: set[int]) -> None:
        super().__init__()
        self._dirs = {str(d.resolve()) for d in spool_dirs}
        self._exclude = exclude
        self.samples: list[tuple[float, dict[int, str]]] = []

    def step(self) -> None:
        at = time.time()
        self.samples.append((at, self.scan()))

    def scan(self) -> dict[int, str]:
        """{pid: attempt id} of the live processes holding an attempt lock now."""
        found: dict[int, str] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in self._exclude:
                continue
            try:
                with open(f"/proc/{name}/stat") as fh:
                    if fh.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                        continue
                fds = os.listdir(f"/proc/{name}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{name}/fd/{fd}")
                except OSError:
                    continue
                head, _, base = target.rpartition("/")
                m = _LOCK.match(base)
                if m and head in self._dirs:
                    found[int(name)] = m.group(1)
                    break
        return found

    def attempts_seen(self) -> set[str]:
        return {a for _, pids in self.samples for a in pids.values()}
