"""``ql3 cluster script ...``: push, list, show, rm — script bundles through control
(docs/protocols.md §4.7). ``push`` packs with the one packer (``qinglong.shared.bundles.pack``:
deterministic, so the same tree gives the same digest); a refused tree exits 2 before
anything is sent.

Control names a bundle by its whole digest only; a unique prefix of 8 or more hex digits is
resolved here through the keyset listing (``GET /v1/scripts?cursor=…&limit=2``, ordered by
digest), in ``show``, ``rm`` and ``task add|edit --bundle``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from qinglong.client import output
from qinglong.client.cli_common import connection, display_options, json_option, print_json
from qinglong.client.errors import ControlConflictError, ControlNotFoundError, PackRefusedError
from qinglong.client.http import ControlClient
from qinglong.shared.errors import ValidationError

MEDIA_TYPE = "application/gzip"
DIGEST_LEN = 64
MIN_PREFIX = 8
_HEX = re.compile(r"[0-9a-f]+")
DIGEST_HELP = ("DIGEST is a bundle's SHA-256 (64 hex digits) or a unique prefix of 8 or "
               "more (control answers whole digests only; the prefix is resolved here).")


@click.group()
def script() -> None:
    """Script bundles: a file or a directory pushed to control, run by tasks.

    Push, then name the digest (or its first 8+ hex digits) in a task; the worker runs
    the entry point inside the extracted bundle. Push and rm need an operator token,
    list and show a viewer's.

    \b
    ql3 cluster script push ./job
    ql3 cluster task add job --schedule @once --bundle 5d9c0a1e \\
        --entry-point run.sh
    ql3 cluster run job --wait && ql3 cluster logs job@last
    """


def resolve_digest(client: ControlClient, text: str, field: str = "DIGEST") -> str:
    """The whole digest ``text`` names: 64 hex digits as given, or the one recorded digest
    starting with a prefix of 8..63 hex digits (upper case accepted). Raises
    ValidationError (exit 2) for other text or a prefix several digests start with, and
    ControlNotFoundError (exit 2) when no recorded digest starts with it."""
    prefix = text.strip().lower()
    if not (MIN_PREFIX <= len(prefix) <= DIGEST_LEN and _HEX.fullmatch(prefix)):
        raise ValidationError(field, f"give a bundle digest: {MIN_PREFIX} to {DIGEST_LEN} "
                                     "hex digits")
    if len(prefix) == DIGEST_LEN:
        return prefix
    floor = int(prefix.ljust(DIGEST_LEN, "0"), 16)  # the first digest the prefix can start
    cursor = f"{floor - 1:0{DIGEST_LEN}x}" if floor else None  # listing is "digest > cursor"
    page = client.get("/v1/scripts", params={"cursor": cursor, "limit": 2})
    found = [i["digest"] for i in page["items"] if i["digest"].startswith(prefix)]
    if not found:
        raise ControlNotFoundError(f"no script bundle's digest starts with {prefix!r}",
                                   "bundle_not_found")
    if len(found) > 1:
        raise ValidationError(field, f"{prefix!r} starts more than one bundle's digest: "
                                     "give more digits")
    digest: str = found[0]
    return digest


@script.command("push")
@click.argument("path", type=click.Path(path_type=Path))
@json_option
@connection
def script_push(path: Path, as_json: bool, client: ControlClient) -> None:
    """Pack PATH (a file, or a directory's contents) and push it to control.

    Packing is deterministic (sorted members, no times or owners, modes 0755/0644), so the
    same tree gives the same digest and pushing it again changes nothing. Symlinks and
    special files are refused, naming the entry, before anything is sent (exit 2).
    Prints the digest, the sizes and whether the bundle is new; --json adds "created".
    """
    from qinglong.shared.bundles import PackError, pack  # the packer: this command's only

    try:
        data = pack(path)
    except PackError as exc:
        raise PackRefusedError(str(path), exc) from None
    status, view = client.send_content("POST", "/v1/scripts", data, MEDIA_TYPE)
    created = status == 201
    if as_json:
        print_json({**view, "created": created})
        return
    entry = path.name if path.is_file() else "FILE"
    click.echo("pushed new bundle" if created
               else "bundle already exists: the same bytes were pushed before")
    click.echo(output.field("digest", view["digest"]))
    click.echo(output.field("members", f"{view['member_count']} (files and directories)"))
    click.echo(output.field("size", f"{output.size(view['size_bytes'])} compressed, "
                                    f"{output.size(view['unpacked_bytes'])} unpacked"))
    click.echo(output.line(f"{'run it with':>13}: --bundle {view['digest'][:MIN_PREFIX]} "
                           f"--entry-point {entry} (task add, task edit)"))


@script.command("list")
@click.option("--limit", type=click.IntRange(1, 10_000), default=None, metavar="N",
              help="At most N bundles (default: all).")
@display_options
@json_option
@connection
def script_list(limit: int | None, as_json: bool, client: ControlClient) -> None:
    """List the bundles by digest (12 hex digits; --wide: all 64): members, compressed and
    unpacked size, how many live tasks name it, when it was pushed."""
    items = client.items("/v1/scripts", limit=limit)
    print_json(items) if as_json else output.print_scripts(items)


@script.command("show", epilog=DIGEST_HELP)
@click.argument("digest")
@display_options
@json_option
@connection
def script_show(digest: str, as_json: bool, client: ControlClient) -> None:
    """Show bundle DIGEST: sizes, the live tasks naming it and its members (mode, size,
    path, in archive order)."""
    full = resolve_digest(client, digest)
    view: dict[str, Any] = client.get(f"/v1/scripts/{full}", script=digest)
    if as_json:
        print_json(view)
        return
    click.echo(output.field("digest", view["digest"]))
    click.echo(output.field("size", f"{output.size(view['size_bytes'])} compressed, "
                                    f"{output.size(view['unpacked_bytes'])} unpacked"))
    click.echo(output.field("pushed_at", view["created_at"]))
    click.echo(output.field("used_by", ", ".join(view["used_by_tasks"]) or "no live task"))
    click.echo(f"members ({view['member_count']}):")
    output.print_members(view["members"])


@script.command("rm", epilog=DIGEST_HELP)
@click.argument("digest")
@json_option
@connection
def script_rm(digest: str, as_json: bool, client: ControlClient) -> None:
    """Remove bundle DIGEST from control and the bucket. Refused (exit 1) while a live task
    names it — the line names those tasks: `task rm` them or point them at another bundle —
    or while an attempt runs it."""
    full = resolve_digest(client, digest)
    try:
        client.send("DELETE", f"/v1/scripts/{full}", script=digest)
    except ControlConflictError as exc:
        if exc.error_code != "bundle_in_use":
            raise
        names = client.get(f"/v1/scripts/{full}", script=digest)["used_by_tasks"]
        if not names:
            raise
        raise ControlConflictError(
            f"script bundle {full[:12]} is in use by task{'s' if len(names) > 1 else ''} "
            f"{', '.join(names)}: remove {'them' if len(names) > 1 else 'it'} or give "
            "another --bundle first", exc.error_code) from None
    if as_json:
        print_json({"removed": full})
    else:
        click.echo(f"removed bundle {full}")
