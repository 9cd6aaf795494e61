"""A stand-in for release "N+1" of ``ql3`` in the rolling-upgrade test (docs/protocols.md
§4.6): ``python next_release.py expand|contract <ql3 arguments>`` runs the installed ``ql3``
(release N) with, in this process only, what a reviewed N+1 change would edit:

- the migration set: the packaged files plus ``next_release/expand.sql`` or ``contract.sql``
  as the next number (copied into a temporary directory), with the pinned count moved by one
  and the pinned last checksum set to that file's SHA-256, a literal below
  (``db/migrations.py``'s ``EXPECTED_MIGRATION_COUNT`` and ``EXPECTED_LAST_SHA256``): a file
  edited without moving its pin here is refused (exit 2);
- ``expand`` only, the runtime role's reviewed grants (``roles.RUNTIME_GRANTS``): UPDATE on
  ``worker_pools`` (table-level: the reviewed set is table by table), and the code that uses
  the new column: every claim that hands out attempts stamps its pool's ``last_claim_at``
  and reads it back (``RETURNING``).

Production has no such switch (no variable, flag or file points the loader elsewhere): the
reviewed set is the packaged directory and the two constants, changed only by review. Exit
2 when the kind is unknown or its file does not match its pin.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

FILES = Path(__file__).resolve().parent / "next_release"  # expand.sql, contract.sql
# the reviewed pin of each N+1 file (sha256 of its bytes), as db/migrations.py pins its last
PINNED = {
    "expand": "2d7f1f5d66d874e43f8a64f2c87822953a3a44f2bf2a8963a4a40e7e2714df81",
    "contract": "f899b8857e80b9cc39a491d98d5f8c27a671afabe392922735eab75f7ffa3fb1",
}
NEW_COLUMN = "last_claim_at"


def command(kind: str) -> tuple[str, ...]:
    """The argv prefix that runs ``ql3`` as release N+1 of ``kind`` ("expand"/"contract")."""
    return (sys.executable, str(Path(__file__).resolve()), kind)


def next_file_name(kind: str) -> str:
    """The N+1 file's name in the migration set: the next number after the packaged files."""
    from qinglong.control.db import migrations

    return f"{migrations.EXPECTED_MIGRATION_COUNT + 1:04d}-next-{kind}.sql"


def _install(kind: str, directory: Path) -> None:
    from qinglong.control.db import migrations, roles
    from qinglong.shared.digest import sha256_hex

    source = FILES / f"{kind}.sql"
    if sha256_hex(source.read_bytes()) != PINNED[kind]:
        sys.stderr.write(f"next_release: {source.name} does not match its pin\n")
        raise SystemExit(2)
    for path in migrations.migrations_dir().glob("*.sql"):
        shutil.copyfile(path, directory / path.name)
    shutil.copyfile(source, directory / next_file_name(kind))
    migrations.migrations_dir = lambda: directory  # type: ignore[assignment]
    migrations.EXPECTED_MIGRATION_COUNT += 1
    migrations.EXPECTED_LAST_SHA256 = PINNED[kind]
    if kind == "expand":
        roles.RUNTIME_GRANTS["worker_pools"] = frozenset({"SELECT", "UPDATE"})
        _stamp_claims()


def _stamp_claims() -> None:
    """N+1's use of the new column: a claim that handed out attempts stamps the pool."""
    from qinglong.control.api import worker_routes
    from qinglong.control.db.engine import run_named

    claim = worker_routes.claim_attempts

    def claim_and_stamp(engine: Any, config: Any, *, pool_id: str, request: Any,
                        **more: Any) -> Any:  # keyword arguments of N's claim pass through
        answer = claim(engine, config, pool_id=pool_id, request=request, **more)
        if answer.attempts:
            with engine.begin() as conn:
                run_named(conn, f"UPDATE worker_pools SET {NEW_COLUMN} = now()"
                          f" WHERE id = %(id)s RETURNING {NEW_COLUMN}", {"id": pool_id}).one()
        return answer

    worker_routes.claim_attempts = claim_and_stamp  # type: ignore[assignment]


def main() -> None:
    """``next_release.py KIND ARGS...``: ``ql3 ARGS...`` as release N+1 of KIND."""
    if len(sys.argv) < 2 or sys.argv[1] not in PINNED:
        sys.stderr.write(f"usage: next_release.py {'|'.join(PINNED)} <ql3 arguments>\n")
        raise SystemExit(2)
    kind = sys.argv[1]
    from importlib.metadata import entry_points

    (ql3,) = entry_points(group="console_scripts", name="ql3")  # what the ql3 script runs
    entry = ql3.load()
    with tempfile.TemporaryDirectory(prefix="ql3-next-") as tmp:
        _install(kind, Path(tmp))
        sys.argv = ["ql3", *sys.argv[2:]]
        entry()


if __name__ == "__main__":
    main()
