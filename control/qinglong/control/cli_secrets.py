"""``ql3 control secrets ...``: seal secret variable values and push-channel URLs at rest
(docs/operations.md "Secret values at rest"; storage and batches in ``secrets/store.py``).

``enable`` switches sealing on for the deployment (once every replica runs code that knows
it) and seals the plaintext left in bounded batches, one transaction each; ``rotate-key``
records the keyring's primary as the one in use and re-seals values of other keys in
batches; ``status`` shows progress in at most 80 columns. Bad input (no keyring, a
malformed one) exits 2 before any change; a database that fails exits 1.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from qinglong.control.cli_common import command_engine as _engine
from qinglong.control.cli_common import json_option as _json
from qinglong.control.cli_common import require_schema as _require_schema
from qinglong.control.cli_common import url_option as _url

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from qinglong.control.secrets.sealing import Keyring

_keyring_opt = click.option(
    "--keyring", "keyring_path", envvar="QL3_SECRETS_KEYRING", required=True,
    help="File of the keyring (env QL3_SECRETS_KEYRING), as given to every replica.")
_batch = click.option("--batch", type=click.IntRange(1, 1000), default=100,
                      show_default=True,
                      help="Tasks (or variable values, channel URLs) per transaction.")


def _load(path: str) -> Keyring:
    from qinglong.control.serve.command import _keyring

    keyring = _keyring(path)
    assert keyring is not None
    return keyring  # type: ignore[no-any-return]


@click.group()
def secrets() -> None:
    """Seal secret variable values at rest (AES-GCM; docs/operations.md)."""


def _seal_all(engine: Engine, keyring: Keyring, batch: int) -> tuple[int, int]:
    from qinglong.control.secrets.store import seal_batch

    rows = values = 0
    while True:
        with engine.begin() as conn:
            result = seal_batch(conn, keyring, limit=batch)
        rows, values = rows + result.rows, values + result.values
        if result.last_id is None:
            return rows, values


def _variables_all(engine: Engine, keyring: Keyring, batch: int, *, reseal: bool,
                   channels: bool = False) -> int:
    """Seal (or re-seal with the primary) every global variable value, or with
    ``channels`` every push-channel URL, that needs it, in batches of ``batch``; returns
    how many."""
    from qinglong.control.secrets import store

    step = ((store.reseal_channels_batch if reseal else store.seal_channels_batch)
            if channels else
            (store.reseal_variables_batch if reseal else store.seal_variables_batch))
    values = 0
    while True:
        with engine.begin() as conn:
            result = step(conn, keyring, limit=batch)
        values += result.values
        if result.last_id is None:
            return values


@secrets.command()
@_url
@_keyring_opt
@_batch
@click.option("--by", default="ql3 control secrets enable", show_default=True,
              help="Who switched it on (recorded).")
def enable(database_url: str, keyring_path: str, batch: int, by: str) -> None:
    """Switch sealing on and seal every secret value and channel URL still in plain text.

    Run it once every replica runs a release that knows sealing, and after each replica
    got the keyring (--secrets-keyring): from now on a replica without it refuses to
    start. Idempotent: a second run seals what is left."""
    from sqlalchemy import text

    keyring = _load(keyring_path)
    with _engine(database_url) as engine:
        _require_schema(engine)
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO secret_sealing (singleton, primary_key_id, enabled_by) "
                "VALUES (true, :k, :by) ON CONFLICT (singleton) DO NOTHING"),
                {"k": keyring.primary, "by": by[:200]})
        rows, values = _seal_all(engine, keyring, batch)
        shared = _variables_all(engine, keyring, batch, reseal=False)
        channels = _variables_all(engine, keyring, batch, reseal=False, channels=True)
    click.echo(f"sealing on (key {keyring.primary}); sealed {values} value(s) in "
               f"{rows} task(s)")
    click.echo(f"sealed {shared} global variable value(s)")
    click.echo(f"sealed {channels} push-channel URL(s)")


@secrets.command("rotate-key")
@_url
@_keyring_opt
@_batch
def rotate_key(database_url: str, keyring_path: str, batch: int) -> None:
    """Re-seal every value with the keyring's primary key.

    Before: add the new key to the keyring as primary and roll every replica. After: remove
    the old key and roll again (docs/operations.md)."""
    from sqlalchemy import text

    from qinglong.control.secrets.store import (
        SecretsKeyMissingError,
        reseal_batch,
        sealing_state,
    )

    keyring = _load(keyring_path)
    rows = values = 0
    with _engine(database_url) as engine:
        _require_schema(engine)
        with engine.begin() as conn:
            if sealing_state(conn) is None:
                raise SecretsKeyMissingError("sealing is off: run `ql3 control secrets "
                                             "enable` first")
            conn.execute(text("UPDATE secret_sealing SET primary_key_id = :k, "
                              "updated_at = now()"), {"k": keyring.primary})
        after: str | None = None
        while True:
            with engine.begin() as conn:
                result = reseal_batch(conn, keyring, after=after, limit=batch)
            rows, values = rows + result.rows, values + result.values
            if result.last_id is None:
                break
            after = result.last_id
        more_rows, more_values = _seal_all(engine, keyring, batch)
        shared = _variables_all(engine, keyring, batch, reseal=True)
        shared += _variables_all(engine, keyring, batch, reseal=False)
        channels = _variables_all(engine, keyring, batch, reseal=True, channels=True)
        channels += _variables_all(engine, keyring, batch, reseal=False, channels=True)
    click.echo(f"primary key {keyring.primary}; re-sealed {values + more_values} "
               f"value(s) in {rows + more_rows} task(s)")
    click.echo(f"re-sealed {shared} global variable value(s)")
    click.echo(f"re-sealed {channels} push-channel URL(s)")


@secrets.command()
@_url
@_json
def status(database_url: str, as_json: bool) -> None:
    """Whether sealing is on, the primary key in use, tasks still holding plain text, and
    sealed values by key id."""
    from qinglong.control.secrets.store import sealing_status

    with _engine(database_url) as engine:
        _require_schema(engine)
        with engine.connect() as conn:
            out: dict[str, Any] = sealing_status(conn)
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
        return
    click.echo(f"sealing: {'on' if out['enabled'] else 'off'}"
               + (f"  primary key: {out['primary_key_id']}" if out["enabled"] else ""))
    click.echo(f"tasks with plaintext secrets: {out['plaintext_tasks']}")
    click.echo(f"variable values in plain text: {out['plaintext_variable_values']}")
    click.echo(f"channel URLs in plain text: {out['plaintext_channel_urls']}")
    for key_id, n in out["sealed_by_key"].items():
        click.echo(f"sealed with {key_id}: {n} value(s)"[:80])
