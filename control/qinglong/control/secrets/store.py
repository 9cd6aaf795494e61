"""Secret variable values sealed at rest in PostgreSQL (docs/operations.md "Secret values at
rest"; the primitive is ``sealing.py``).

Storage (migration 0011): a secret entry of ``tasks.env`` keeps ``{"secret": true}`` and no
``"value"``; its value lives sealed in ``tasks.sealed_env`` (``{"NAME": "v1.<key id>...."}``)
with the task id and the variable name as associated data. Non-secret entries stay as they
are. The ``secret_sealing`` row switches sealing on for the whole deployment
(``ql3 control secrets enable``); from then on every write seals (``stored_env``) and a
replica holding the keyring moves the remaining plaintext in bounded batches
(``seal_batch``); ``reseal_batch`` re-seals values of a key that is no longer primary.

The cluster's global variables (migration 0012) plug in the same way with their own calls:
a value of a secret variable is written by ``stored_variable_value`` (``value`` '' and
``sealed_value`` set once sealing is on), read back by ``opened_variable_value`` (only
``db/variables.py``'s ``pool_environment`` does, for a claim), and sealed or re-sealed by
``seal_variables_batch`` / ``reseal_variables_batch``; associated data
``global_variables/<name>`` and the name.

Push-channel URLs (migration 0014; an Apprise URL carries its token, so the whole URL is the
secret) likewise: ``stored_channel_url`` on write (``url`` '' and ``sealed_url`` set once
sealing is on), ``opened_channel_url`` when ``notify.py`` sends, and
``seal_channels_batch`` / ``reseal_channels_batch``; associated data
``notify_channels/<id>`` and ``url``.

Errors name a variable or a key id, never a value or key material.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import text

from qinglong.control.secrets.sealing import Keyring
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Connection

BATCH_DEFAULT = 100
# the partial index tasks_plaintext_secret_idx has exactly this predicate (0011)
_PLAINTEXT = "jsonb_path_exists(env, '$.* ? (@.secret == true && exists(@.value))')"


class SecretsKeyMissingError(ValidationError):
    """Sealing is on for this deployment but this process holds no keyring: it can neither
    seal a new secret value nor open one for a claim. At start a replica exits 2 with it
    (a ValidationError of ``--secrets-keyring``); the API answers 503."""

    code = "secrets_key_missing"

    def __init__(self, message: str) -> None:
        super().__init__("--secrets-keyring", message)


@dataclass(frozen=True)
class SealingState:
    """The ``secret_sealing`` row: ``primary_key_id`` the last enable/rotate asked for."""

    primary_key_id: str
    enabled_by: str


def sealing_state(conn: Connection) -> SealingState | None:
    """The deployment's sealing switch, or None while sealing is off."""
    row = conn.execute(text(
        "SELECT primary_key_id, enabled_by FROM secret_sealing")).first()
    return None if row is None else SealingState(str(row[0]), str(row[1]))


def seal_env(keyring: Keyring, row_id: str, env: Mapping[str, Any]
             ) -> tuple[dict[str, Any], dict[str, str]]:
    """Split ``env`` (``{"NAME": {"value": str, "secret": bool}}``) into the entries to store
    (each secret one without its value) and the sealed values by name."""
    stored: dict[str, Any] = {}
    sealed: dict[str, str] = {}
    for name, entry in env.items():
        if isinstance(entry, Mapping) and entry.get("secret") and "value" in entry:
            stored[name] = {"secret": True}
            sealed[name] = keyring.seal(str(entry["value"]), row_id=row_id, name=name)
        else:
            stored[name] = entry
    return stored, sealed


def opened_env(keyring: Keyring | None, row_id: str, env: Mapping[str, Any],
               sealed: Mapping[str, str] | None) -> dict[str, Any]:
    """``env`` with each sealed value opened back into its entry (``{"value", "secret"}``).
    A row without sealed values needs no keyring. Raises SecretsKeyMissingError when it has
    some and ``keyring`` is None, SealError when one does not open."""
    out = {name: dict(entry) if isinstance(entry, Mapping) else entry
           for name, entry in env.items()}
    if not sealed:
        return out
    if keyring is None:
        raise SecretsKeyMissingError("secret values are sealed and this process holds no "
                                     "keyring")
    for name, value in sealed.items():
        out[name] = {"value": keyring.open(value, row_id=row_id, name=name), "secret": True}
    return out


def stored_env(conn: Connection, keyring: Keyring | None, row_id: str,
               env: Mapping[str, Any]) -> dict[str, Any]:
    """The column values to write for ``env`` of row ``row_id``: ``{"env", "sealed_env"}``,
    sealed when the switch is on (read in the caller's transaction), else as given with
    ``sealed_env`` NULL. Raises SecretsKeyMissingError when on and ``keyring`` is None."""
    if sealing_state(conn) is None:
        return {"env": dict(env), "sealed_env": None}
    if keyring is None:
        raise SecretsKeyMissingError("sealing is on and this process holds no keyring: "
                                     "secret values cannot be stored")
    plain, sealed = seal_env(keyring, row_id, env)
    return {"env": plain, "sealed_env": sealed or None}


def _rewrite(conn: Connection, keyring: Keyring, rows: list[Any]) -> int:
    values = 0
    for row_id, env, sealed in rows:
        full = opened_env(keyring, str(row_id), env or {}, sealed)
        plain, new_sealed = seal_env(keyring, str(row_id), full)
        values += len(new_sealed)
        conn.execute(text(
            "UPDATE tasks SET env = CAST(:env AS jsonb), sealed_env = CAST(:sealed AS jsonb) "
            "WHERE id = :id"), {"id": row_id, "env": _json(plain),
                                "sealed": _json(new_sealed) if new_sealed else None})
    return values


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class BatchResult:
    """One bounded batch: ``rows`` tasks rewritten, ``values`` secret values sealed in them,
    ``last_id`` the keyset cursor for the next batch (None when this one was short: done)."""

    rows: int
    values: int
    last_id: str | None


def seal_batch(conn: Connection, keyring: Keyring, *, limit: int = BATCH_DEFAULT
               ) -> BatchResult:
    """Seal the plaintext secret values of at most ``limit`` tasks (rows locked
    ``FOR UPDATE SKIP LOCKED``, so replicas running it at once share the work; found by the
    partial index of 0011) and clear their plaintext. Runs in the caller's transaction;
    does nothing while sealing is off."""
    if sealing_state(conn) is None:
        return BatchResult(0, 0, None)
    rows = list(conn.execute(text(
        f"SELECT id, env, sealed_env FROM tasks WHERE {_PLAINTEXT} "  # noqa: S608
        "ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED"), {"n": limit}))
    values = _rewrite(conn, keyring, rows)
    return BatchResult(len(rows), values,
                       str(rows[-1][0]) if len(rows) == limit else None)


def reseal_batch(conn: Connection, keyring: Keyring, *, after: str | None = None,
                 limit: int = BATCH_DEFAULT) -> BatchResult:
    """Re-seal with the primary key every sealed value of at most ``limit`` tasks (ids after
    ``after``, keyset order) that holds a value sealed with another key (rotation). Runs in
    the caller's transaction."""
    rows = list(conn.execute(text(
        "SELECT id, env, sealed_env FROM tasks WHERE sealed_env IS NOT NULL "
        "AND id > CAST(:after AS uuid) AND EXISTS (SELECT 1 FROM "
        "jsonb_each_text(sealed_env) e WHERE split_part(e.value, '.', 2) <> :primary) "
        "ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED"),
        {"after": after or "00000000-0000-0000-0000-000000000000",
         "primary": keyring.primary, "n": limit}))
    values = _rewrite(conn, keyring, rows)
    return BatchResult(len(rows), values,
                       str(rows[-1][0]) if len(rows) == limit else None)


def variable_row_id(name: str) -> str:
    """The associated data's row id of a value of global variable ``name``."""
    return f"global_variables/{name}"


def stored_variable_value(conn: Connection, keyring: Keyring | None, name: str, value: str,
                          *, secret: bool) -> tuple[str, str | None]:
    """``(value, sealed_value)`` to write for a value of variable ``name``: ``("",
    sealed)`` when ``secret`` and sealing is on (read in the caller's transaction), else
    ``(value, None)``. Raises SecretsKeyMissingError when it must seal and ``keyring`` is
    None."""
    if not secret:
        return value, None
    return _stored(conn, keyring, variable_row_id(name), name, value)


def _stored(conn: Connection, keyring: Keyring | None, row_id: str, name: str,
            value: str) -> tuple[str, str | None]:
    """``("", value sealed for (row_id, name))`` when sealing is on, else ``(value,
    None)``; SecretsKeyMissingError when on and ``keyring`` is None."""
    if sealing_state(conn) is None:
        return value, None
    if keyring is None:
        raise SecretsKeyMissingError("sealing is on and this process holds no keyring: "
                                     "secret values cannot be stored")
    return "", keyring.seal(value, row_id=row_id, name=name)


def opened_variable_value(keyring: Keyring | None, name: str, value: str,
                          sealed: str | None) -> str:
    """The plain value of a stored variable value (``sealed`` None: ``value`` itself).
    Raises SecretsKeyMissingError when sealed and ``keyring`` is None, SealError when it
    does not open."""
    return _opened(keyring, variable_row_id(name), name, value, sealed)


def _opened(keyring: Keyring | None, row_id: str, name: str, value: str,
            sealed: str | None) -> str:
    """``value`` when ``sealed`` is None, else ``sealed`` opened for (row_id, name)."""
    if sealed is None:
        return value
    if keyring is None:
        raise SecretsKeyMissingError("secret values are sealed and this process holds no "
                                     "keyring")
    return keyring.open(sealed, row_id=row_id, name=name)


def _rewrite_variables(conn: Connection, keyring: Keyring, rows: list[Any],
                       limit: int) -> BatchResult:
    for name, position, value, sealed in rows:
        plain = opened_variable_value(keyring, str(name), str(value), sealed)
        conn.execute(text(
            "UPDATE global_variable_values SET value = '', sealed_value = :sealed "
            "WHERE name = :name AND position = :pos"),
            {"name": name, "pos": position,
             "sealed": keyring.seal(plain, row_id=variable_row_id(str(name)),
                                    name=str(name))})
    last = f"{rows[-1][0]}/{rows[-1][1]}" if len(rows) == limit else None
    return BatchResult(len(rows), len(rows), last)


_PLAINTEXT_VARIABLE = (
    "FROM global_variable_values x JOIN global_variables v ON v.name = x.name "
    "WHERE v.secret AND x.sealed_value IS NULL")


def seal_variables_batch(conn: Connection, keyring: Keyring, *,
                         limit: int = BATCH_DEFAULT) -> BatchResult:
    """Seal at most ``limit`` plaintext values of secret global variables (rows locked
    ``FOR UPDATE OF x SKIP LOCKED``; found by 0012's partial index) and clear their
    plaintext. A sealed value no longer matches, so the caller repeats until ``last_id`` is
    None. Runs in the caller's transaction; does nothing while sealing is off."""
    if sealing_state(conn) is None:
        return BatchResult(0, 0, None)
    rows = list(conn.execute(text(
        f"SELECT x.name, x.position, x.value, x.sealed_value {_PLAINTEXT_VARIABLE} "
        "ORDER BY x.name, x.position LIMIT :n FOR UPDATE OF x SKIP LOCKED"), {"n": limit}))
    return _rewrite_variables(conn, keyring, rows, limit)


def reseal_variables_batch(conn: Connection, keyring: Keyring, *,
                           limit: int = BATCH_DEFAULT) -> BatchResult:
    """Re-seal with the primary key at most ``limit`` variable values sealed with another
    key (rotation); a re-sealed value no longer matches, so the caller repeats until
    ``last_id`` is None. Runs in the caller's transaction."""
    rows = list(conn.execute(text(
        "SELECT name, position, value, sealed_value FROM global_variable_values "
        "WHERE sealed_value IS NOT NULL AND split_part(sealed_value, '.', 2) <> :primary "
        "ORDER BY name, position LIMIT :n FOR UPDATE SKIP LOCKED"),
        {"primary": keyring.primary, "n": limit}))
    return _rewrite_variables(conn, keyring, rows, limit)


CHANNEL_NAME = "url"  # the associated data's name of a channel URL


def channel_row_id(channel_id: str) -> str:
    """The associated data's row id of push channel ``channel_id`` (its uuid as text)."""
    return f"notify_channels/{channel_id}"


def stored_channel_url(conn: Connection, keyring: Keyring | None, channel_id: str,
                       url: str) -> tuple[str, str | None]:
    """``(url, sealed_url)`` to write for channel ``channel_id``: ``("", sealed)`` when
    sealing is on (read in the caller's transaction), else ``(url, None)``. Raises
    SecretsKeyMissingError when it must seal and ``keyring`` is None."""
    return _stored(conn, keyring, channel_row_id(channel_id), CHANNEL_NAME, url)


def opened_channel_url(keyring: Keyring | None, channel_id: str, url: str,
                       sealed: str | None) -> str:
    """The plain URL of a stored channel (``sealed`` None: ``url`` itself). Raises
    SecretsKeyMissingError when sealed and ``keyring`` is None, SealError when it does not
    open (the message names no URL)."""
    return _opened(keyring, channel_row_id(channel_id), CHANNEL_NAME, url, sealed)


def _rewrite_channels(conn: Connection, keyring: Keyring, rows: list[Any],
                      limit: int) -> BatchResult:
    for channel_id, url, sealed in rows:
        plain = opened_channel_url(keyring, str(channel_id), str(url), sealed)
        conn.execute(text(
            "UPDATE notify_channels SET url = '', sealed_url = :sealed WHERE id = :id"),
            {"id": channel_id,
             "sealed": keyring.seal(plain, row_id=channel_row_id(str(channel_id)),
                                    name=CHANNEL_NAME)})
    last = str(rows[-1][0]) if len(rows) == limit else None
    return BatchResult(len(rows), len(rows), last)


def seal_channels_batch(conn: Connection, keyring: Keyring, *,
                        limit: int = BATCH_DEFAULT) -> BatchResult:
    """Seal at most ``limit`` plaintext channel URLs (rows locked ``FOR UPDATE SKIP
    LOCKED``; found by 0014's partial index) and clear their plaintext. A sealed URL no
    longer matches, so the caller repeats until ``last_id`` is None. Runs in the caller's
    transaction; does nothing while sealing is off."""
    if sealing_state(conn) is None:
        return BatchResult(0, 0, None)
    rows = list(conn.execute(text(
        "SELECT id, url, sealed_url FROM notify_channels WHERE sealed_url IS NULL "
        "ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED"), {"n": limit}))
    return _rewrite_channels(conn, keyring, rows, limit)


def reseal_channels_batch(conn: Connection, keyring: Keyring, *,
                          limit: int = BATCH_DEFAULT) -> BatchResult:
    """Re-seal with the primary key at most ``limit`` channel URLs sealed with another key
    (rotation); a re-sealed URL no longer matches, so the caller repeats until ``last_id``
    is None. Runs in the caller's transaction."""
    rows = list(conn.execute(text(
        "SELECT id, url, sealed_url FROM notify_channels WHERE sealed_url IS NOT NULL "
        "AND split_part(sealed_url, '.', 2) <> :primary "
        "ORDER BY id LIMIT :n FOR UPDATE SKIP LOCKED"),
        {"primary": keyring.primary, "n": limit}))
    return _rewrite_channels(conn, keyring, rows, limit)


def sealing_status(conn: Connection) -> dict[str, Any]:
    """``{"enabled": bool, "primary_key_id": str|None, "plaintext_tasks": int,
    "plaintext_variable_values": int, "plaintext_channel_urls": int, "sealed_by_key":
    {key id: values}}`` (values of tasks, of global variables and channel URLs together):
    what status prints."""
    state = sealing_state(conn)
    plaintext = int(conn.execute(text(
        f"SELECT count(*) FROM tasks WHERE {_PLAINTEXT}")).scalar_one())  # noqa: S608
    by_key = {str(k): int(n) for k, n in conn.execute(text(
        "SELECT split_part(e.value, '.', 2), count(*) FROM tasks, "
        "jsonb_each_text(tasks.sealed_env) e WHERE tasks.sealed_env IS NOT NULL "
        "GROUP BY 1 ORDER BY 1"))}
    for key_id, n in conn.execute(text(
            "SELECT split_part(sealed_value, '.', 2), count(*) FROM global_variable_values "
            "WHERE sealed_value IS NOT NULL GROUP BY 1")):
        by_key[str(key_id)] = by_key.get(str(key_id), 0) + int(n)
    for key_id, n in conn.execute(text(
            "SELECT split_part(sealed_url, '.', 2), count(*) FROM notify_channels "
            "WHERE sealed_url IS NOT NULL GROUP BY 1")):
        by_key[str(key_id)] = by_key.get(str(key_id), 0) + int(n)
    channels = int(conn.execute(text(
        "SELECT count(*) FROM notify_channels WHERE sealed_url IS NULL")).scalar_one())
    variables = int(conn.execute(text(
        f"SELECT count(*) {_PLAINTEXT_VARIABLE}")).scalar_one())
    return {"enabled": state is not None,
            "primary_key_id": state.primary_key_id if state else None,
            "plaintext_tasks": plaintext, "plaintext_variable_values": variables,
            "plaintext_channel_urls": channels,
            "sealed_by_key": dict(sorted(by_key.items()))}


def load_keyring(path: str) -> Keyring:
    """The keyring in file ``path`` (``Keyring.from_json``'s shape; a Kubernetes Secret
    mount is a symlink, so links are followed). Raises KeyringError naming the path's
    problem, never its content."""
    from qinglong.control.secrets.sealing import KeyringError

    try:
        with open(path, encoding="utf-8") as handle:
            content = handle.read(1 << 20)
    except OSError as exc:
        raise KeyringError(f"cannot read the keyring file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise KeyringError("the keyring file is not UTF-8 text") from None
    return Keyring.from_json(content)
