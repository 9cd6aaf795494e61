"""``ql3 control token create|list|revoke|import`` (docs/protocols.md §4.5; issue 11 item 7).

Run as the schema owner (``--database-url`` / ``QL3_DATABASE_URL``): it creates worker pools,
which the runtime role may only read. ``create``, ``import`` and ``revoke`` refuse (exit 2) a
role that cannot create objects in schema public, such as the replicas' runtime login that
``QL3_DATABASE_URL`` often holds; ``list`` works for any role that can read the tables. A
name already held by a live token is refused (exit 2) until that token is revoked.

``create`` prints the new token once on stdout and nowhere else (never logged, never stored:
the database keeps its SHA-256). ``import`` records a token known by its hash: given
(``--sha256``), read from a file (``--sha256-file``), or computed here from a file holding the
token (``--token-file``, e.g. a mounted Kubernetes Secret); the token is never printed, logged
or stored. ``--ensure`` makes ``import`` idempotent for a hook that runs at every install and
upgrade (the Helm chart's migration Job): the same token again changes nothing, a changed one
(a rotated Secret) replaces the live token of that name; with ``--overlap SECONDS`` the
replaced token's revocation is scheduled that far ahead (database clock) instead of now, so
the workers still holding it can switch to the new one (``token list`` shows it as
``revokes at … (pending)``; ``token revoke`` ends it at once). A ``--pool`` is created when missing,
with ``--pool-labels``. An existing pool whose labels differ from given ``--pool-labels`` is
refused (exit 2) by ``create`` and by ``import`` without ``--ensure``; with ``--ensure`` (the
labels in the chart's values are the wanted state) its labels are set to the given ones, in
the same transaction, and one line on stderr says they changed from what to what.
"""

from __future__ import annotations

import json
from typing import Any

import click

from qinglong.control.cli_common import url_label as _url_label
from qinglong.control.cli_errors import checked_database_url

_url = click.option(
    "--database-url", envvar="QL3_DATABASE_URL", required=True,
    callback=lambda _c, _p, v: checked_database_url(v, option=_url_label()),
    help="PostgreSQL URL of the schema owner, postgresql://... (env QL3_DATABASE_URL). "
         "create, import and revoke refuse a role that cannot create objects in schema "
         "public (e.g. the replicas' runtime login); list needs only read access.")


def _refuse_non_owner(conn: Any) -> None:
    """MigrationOwnerRequiredError (exit 2, naming the URL's option) unless ``conn``'s role
    can create objects in schema public: tokens are issued by the schema owner, not by the
    runtime login a replica's QL3_DATABASE_URL holds."""
    from qinglong.control.db.roles import refuse_non_owner

    refuse_non_owner(conn, _url_label(), action="issue and revoke tokens")
_name = click.option("--name", required=True, help="A label for the token (1–100 chars).")
_scope = click.option("--scope", required=True,
                      type=click.Choice(["viewer", "operator", "admin", "worker"]),
                      help="viewer ⊂ operator ⊂ admin; worker: /v1/worker/* only.")
_pool = click.option("--pool", default=None, help="Worker pool name (worker scope only).")
_json = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def parse_labels(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` as a label map checked by ``wire.check_labels``; ValidationError
    (exit 2) naming ``--pool-labels`` otherwise."""
    from qinglong.shared.errors import ValidationError
    from qinglong.shared.wire import check_labels

    if not text:
        return {}
    labels: dict[str, str] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValidationError("--pool-labels", "write key=value pairs separated by ,")
        labels[key.strip()] = value.strip()
    try:
        return check_labels(labels, "--pool-labels")
    except ValidationError:
        raise ValidationError("--pool-labels", "keys and values are [A-Za-z0-9][A-Za-z0-9_.-]*"
                                               " (≤ 63 chars), at most 32 pairs") from None


def label_text(labels: dict[str, str]) -> str:
    """A label map as ``k=v,k2=v2`` in key order, ``(none)`` when empty (for messages)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "(none)"


def _pool_id(conn: Any, pool: str, labels: dict[str, str] | None, *,
             relabel: bool = False) -> tuple[str, dict[str, str] | None]:
    """(id, previous labels) of pool ``pool``, created with ``labels`` (or none) when
    missing. When it exists with labels other than given ``labels``: with ``relabel`` they
    are set to ``labels`` and the previous ones returned (else None: nothing changed);
    without it ValidationError (exit 2) naming ``--pool-labels``."""
    import re

    from qinglong.shared.errors import ValidationError
    from qinglong.shared.ids import uuid7

    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,62}", pool):
        raise ValidationError("--pool", "must be [a-z0-9][a-z0-9_.-]* (≤ 63 chars)")
    conn.exec_driver_sql(
        "INSERT INTO worker_pools (id, name, labels) VALUES (%(id)s, %(name)s, %(labels)s)"
        " ON CONFLICT (name) DO NOTHING",
        {"id": uuid7(), "name": pool, "labels": json.dumps(labels or {})})
    row = conn.exec_driver_sql("SELECT id::text, labels FROM worker_pools WHERE name = %(n)s"
                               " FOR UPDATE", {"n": pool}).one()
    if labels is None or dict(row[1]) == labels:
        return str(row[0]), None
    if not relabel:
        raise ValidationError("--pool-labels", "the pool exists with other labels")
    conn.exec_driver_sql("UPDATE worker_pools SET labels = %(labels)s WHERE id = %(id)s",
                         {"labels": json.dumps(labels), "id": row[0]})
    return str(row[0]), dict(row[1])


def _record(database_url: str, name: str, scope: str, sha256: str, pool: str | None,
            pool_labels: str | None, *, ensure: bool = False,
            overlap_s: int = 0) -> tuple[str, str]:
    """Record the token in one transaction as the schema owner: (token id, outcome), the
    outcome ``created`` unless ``ensure`` (then ``auth.tokens.ensure_token``'s, a replaced
    token revoked ``overlap_s`` seconds from now). With ``ensure`` a pool's differing
    labels are set to ``pool_labels``; once committed, one line on stderr says from what to
    what."""
    from qinglong.control.auth.tokens import ensure_token, insert_token
    from qinglong.control.db.engine import create_engine
    from qinglong.shared.errors import ValidationError

    labels = parse_labels(pool_labels) if pool_labels is not None else None
    if labels is not None and pool is None:
        raise ValidationError("--pool-labels", "needs --pool")
    if (scope == "worker") != (pool is not None):
        raise ValidationError("--pool", "a worker token needs a pool; other scopes take none")
    from sqlalchemy.exc import IntegrityError

    from qinglong.shared.errors import ConflictError

    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    pool_id, before = None, None
    try:
        with engine.begin() as conn:
            _refuse_non_owner(conn)
            if pool is not None:
                pool_id, before = _pool_id(conn, pool, labels, relabel=ensure)
            if ensure:
                result = ensure_token(conn, name=name, scope=scope, sha256=sha256,
                                      pool_id=pool_id, overlap_s=overlap_s)
            else:
                result = insert_token(conn, name=name, scope=scope, sha256=sha256,
                                      pool_id=pool_id), "created"
    except IntegrityError:
        raise ConflictError("a token with this SHA-256 is already recorded (under another "
                            "name, or revoked: a revoked token is never revived)") from None
    finally:
        engine.dispose()
    if before is not None and labels is not None:
        click.echo(f"pool {pool}: labels changed from {label_text(before)} to "
                   f"{label_text(labels)}", err=True)
    return result


@click.group()
def token() -> None:
    """Issue, list, revoke and import API tokens (as the schema owner)."""


@token.command()
@_url
@_name
@_scope
@_pool
@click.option("--pool-labels", default=None, help="k=v,... labels of a new pool.")
@_json
def create(database_url: str, name: str, scope: str, pool: str | None,
           pool_labels: str | None, as_json: bool) -> None:
    """Issue a token and print it once (it cannot be shown again)."""
    from qinglong.control.auth.tokens import new_token, token_hash

    secret = new_token()
    token_id, _ = _record(database_url, name, scope, token_hash(secret), pool, pool_labels)
    if as_json:
        click.echo(json.dumps({"id": token_id, "token": secret}, sort_keys=True))
    else:
        click.echo(f"id {token_id}\ntoken {secret}\n(shown once: store it now)")


MAX_FILE_BYTES = 4096


def _read_small_file(path: str, option: str) -> str:
    """The text of ``path`` (at most 4 KiB, surrounding whitespace stripped). Raises
    ValidationError naming ``option`` when it cannot be read, is too large or empty; the
    message never holds the file's content."""
    from qinglong.shared.errors import ValidationError

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValidationError(option, f"cannot be read ({exc.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise ValidationError(option, "is too large for a token or its hash")
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        raise ValidationError(option, "is empty")
    return text


def imported_hash(digest: str | None, sha256_file: str | None, token_file: str | None) -> str:
    """The hex SHA-256 to record, from exactly one of ``--sha256``, ``--sha256-file`` (a
    file holding the hex digest) and ``--token-file`` (a file holding the token itself,
    hashed here; it must have the shape ``ql3 control token create`` gives, or it could
    never authenticate). ValidationError (exit 2) otherwise; never echoes a token."""
    from qinglong.control.auth.tokens import check_hash, looks_like_token, token_hash
    from qinglong.shared.errors import ValidationError

    given = [v for v in (digest, sha256_file, token_file) if v is not None]
    if len(given) != 1:
        raise ValidationError("--sha256", "give exactly one of --sha256, --sha256-file and "
                                          "--token-file")
    if token_file is not None:
        token = _read_small_file(token_file, "--token-file")
        if not looks_like_token(token):
            raise ValidationError("--token-file", "does not hold a ql3 token (ql3_ and 43 "
                                                  "URL-safe base64 characters)")
        return token_hash(token)
    if sha256_file is not None:
        text = _read_small_file(sha256_file, "--sha256-file").lower()
        try:
            return check_hash(text)
        except ValidationError:
            raise ValidationError("--sha256-file", "must hold 64 hex digits") from None
    return check_hash((digest or "").strip().lower())


@token.command(name="import")
@_url
@_name
@_scope
@_pool
@click.option("--pool-labels", default=None,
              help="k=v,... labels of a new pool; with --ensure also the labels an existing "
                   "pool is set to (without it, other labels are refused).")
@click.option("--sha256", "digest", default=None, help="Hex SHA-256 of the token.")
@click.option("--sha256-file", default=None,
              help="File holding the token's hex SHA-256 (e.g. a mounted Secret).")
@click.option("--token-file", default=None,
              help="File holding the token itself (e.g. a mounted Secret): hashed here, "
                   "never printed or stored.")
@click.option("--ensure", is_flag=True,
              help="Idempotent: a live token of this name with this hash, scope and pool "
                   "is left as it is; one that differs (a rotated Secret) is revoked (see "
                   "--overlap) and this one recorded, in one transaction. An existing "
                   "pool's labels are set to --pool-labels (one line on stderr when they "
                   "change).")
@click.option("--overlap", "overlap_s", type=int, default=None, metavar="SECONDS",
              help="With --ensure: a replaced token stays valid for SECONDS more (0–30 "
                   "days, by the database clock) so its holders can switch to the new one; "
                   "default 0, revoked at once.")
@_json
def import_(database_url: str, name: str, scope: str, pool: str | None,
            pool_labels: str | None, digest: str | None, sha256_file: str | None,
            token_file: str | None, ensure: bool, overlap_s: int | None,
            as_json: bool) -> None:
    """Record a token by its SHA-256 (e.g. from a Kubernetes Secret); prints its id
    (--json: id and outcome, created, unchanged or replaced). Give exactly one of --sha256,
    --sha256-file and --token-file."""
    from qinglong.control.auth.tokens import check_overlap
    from qinglong.shared.errors import ValidationError

    if overlap_s is not None and not ensure:
        raise ValidationError("--overlap", "needs --ensure")
    overlap = check_overlap(overlap_s or 0)
    sha256 = imported_hash(digest, sha256_file, token_file)
    token_id, outcome = _record(database_url, name, scope, sha256, pool, pool_labels,
                                ensure=ensure, overlap_s=overlap)
    if as_json:
        click.echo(json.dumps({"id": token_id, "outcome": outcome}, sort_keys=True))
    else:
        click.echo(token_id)


@token.command(name="list")
@_url
@_json
def list_(database_url: str, as_json: bool) -> None:
    """Every token as a table (ID, SCOPE, POOL, STATE, NAME), STATE live, revoking (a
    rotation's overlap runs: it authenticates until then) or revoked, the revocation's time
    on the line below ("revokes at TIME (pending)", "revoked TIME"). Never a token or hash."""
    from qinglong.control.auth.tokens import list_tokens
    from qinglong.control.db.engine import create_engine

    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            rows = list_tokens(conn)
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps(rows, default=str, sort_keys=True, ensure_ascii=False))
        return
    from qinglong.shared.display import fit_table

    table, notes = [], []
    for row in rows:
        state, note = "live", ""
        if row["revoked_at"] is not None:
            when = f"{row['revoked_at']:%Y-%m-%dT%H:%M:%SZ}"
            state, note = (("revoking", f"  revokes at {when} (pending)")
                           if row["revocation_pending"] else ("revoked", f"  revoked {when}"))
        table.append([str(row["id"]), row["scope"], row["pool"] or "-", state, row["name"]])
        notes.append(note)
    # a header row and lines within the terminal's width (the name gives way); a revocation's
    # time on its own line below the token's
    lines = fit_table(["id", "scope", "pool", "state", "name"], table, flexible=("name",))
    click.echo(lines[0])
    for line, note in zip(lines[1:], notes, strict=True):
        click.echo(line)
        if note:
            click.echo(note)


@token.command()
@_url
@click.argument("token_id")
def revoke(database_url: str, token_id: str) -> None:
    """Revoke token TOKEN_ID now, also one whose revocation is pending (an overlap); its
    next request is refused. Exit 2 when unknown or already revoked."""
    from qinglong.control.auth.tokens import revoke_token
    from qinglong.control.db.engine import create_engine
    from qinglong.shared.errors import NotFoundError, ValidationError
    from qinglong.shared.ids import validate_uuid7

    try:
        validate_uuid7(token_id.strip().lower(), "TOKEN_ID")
    except ValidationError:
        raise ValidationError("TOKEN_ID", "is not a token id (UUIDv7)") from None
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with engine.begin() as conn:
            _refuse_non_owner(conn)
            done = revoke_token(conn, token_id.strip().lower())
    finally:
        engine.dispose()
    if not done:
        raise NotFoundError("no live token has this id (unknown or already revoked)")
    click.echo(f"revoked {token_id.strip().lower()}")
