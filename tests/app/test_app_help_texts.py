"""Every ``ql3`` command's ``--help`` reads as plain text: no reStructuredText markup from a
docstring (``--json`` showed as ````--json````) and no line wider than 80 columns on the
screen (a CJK character takes two: ``shared/display.text_width``)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from qinglong.local.app.cli import main
from qinglong.shared.display import text_width


def commands(group: click.Group, ctx: click.Context,
             path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Context]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, (path, name)
        sub = click.Context(command, info_name=name, parent=ctx, terminal_width=80,
                            max_content_width=80)
        yield (*path, name), sub
        if isinstance(command, click.Group):
            yield from commands(command, sub, (*path, name))


def test_every_help_is_plain_text_within_80_columns() -> None:
    root = click.Context(main, info_name="ql3", terminal_width=80, max_content_width=80)
    seen = list(commands(main, root))
    assert len(seen) > 40  # local, control, worker and cluster commands were walked
    bad = []
    for path, ctx in seen:
        text = ctx.command.get_help(ctx)
        if "``" in text or any(text_width(line) > 80 for line in text.splitlines()):
            bad.append(" ".join(path))
    assert bad == []
