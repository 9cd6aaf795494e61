"""The ``NAME=value`` lines of a variables export and import (docs/panel.md "Pages",
Variables), one format for both profiles' Variables page and control's
``GET /v1/vars/export`` (docs/protocols.md §4.5 "Global variables"), so an export read
back by an import is a round trip. Standard library only: control imports it without the
panel's web stack.
"""

from __future__ import annotations

# Export and import lines (docs/panel.md "Variables"): ``NAME=value``, the value in shell
# double quotes unless it is only characters a shell leaves alone; a ``# remark`` line just
# before a value line is that value's remark.
_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:,=@%+-")
_ESCAPED = frozenset('\\"$`')


def export_line(name: str, value: str, remark: str) -> str:
    """One value as export lines: ``# remark`` (when there is one) and ``NAME=value``, the
    value bare when it is not empty and every character is in ``[A-Za-z0-9_./:,=@%+-]`` or
    a non-ASCII letter or digit (``京东``), else in double quotes with ``\\ " $ ` ``
    escaped by a backslash (what ``sh`` reads back as the same value, and what
    :func:`parse_lines` does)."""
    shown = value if value and all(c in _BARE or (c > "\x7f" and c.isalnum())
                                   for c in value) else (
        '"' + "".join("\\" + c if c in _ESCAPED else c for c in value) + '"')
    head = f"# {remark}\n" if remark else ""
    return f"{head}{name}={shown}\n"


def exportable(value: str) -> bool:
    """True when ``value`` fits on one export line (no line break of any kind that
    :meth:`str.splitlines` splits at): an import reads lines, so a multi-line value is
    left out of an export rather than cut."""
    return value == "" or value.splitlines() == [value]


def export_text(values: list[tuple[str, str, str]]) -> str:
    """The export lines of ``(name, value, remark)`` in order, each through
    :func:`export_line`; a value that is not :func:`exportable` is left out."""
    return "".join(export_line(name, value, remark) for name, value, remark in values
                   if exportable(value))


def _unquote(text: str) -> str | None:
    """A value as written after ``=``: ``"..."`` (``\\`` before ``\\ " $ ` `` escapes it),
    ``'...'`` (literal), or else the text as is; None for a double-quoted value that does
    not end at its closing quote."""
    if len(text) >= 2 and text[0] == text[-1] == "'" and "'" not in text[1:-1]:
        return text[1:-1]
    if not text.startswith('"'):
        return text
    out: list[str] = []
    at = 1
    while at < len(text):
        char = text[at]
        if char == "\\" and at + 1 < len(text) and text[at + 1] in _ESCAPED:
            out.append(text[at + 1])
            at += 2
        elif char == '"':
            return "".join(out) if at == len(text) - 1 else None
        else:
            out.append(char)
            at += 1
    return None


def parse_lines(lines: list[str]) -> list[tuple[str, str | None, str | None]]:
    """``(name, value, remark)`` for each value line of an import (:func:`export_line`'s
    format; ``export NAME=...`` too); blank lines and other comments are skipped, a
    ``# text`` line right before a value line is its remark. ``value`` None: a line the
    import counts as refused (no ``=``, no name, or an unclosed quote)."""
    out: list[tuple[str, str | None, str | None]] = []
    remark: str | None = None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            remark = None
            continue
        if stripped.startswith("#"):
            remark = stripped[1:].strip() or None
            continue
        name, sep, value = line.partition("=")
        name = name.strip().removeprefix("export ").strip()
        text = _unquote(value.strip()) if value.strip()[:1] in ("\"", "'") else value
        out.append((name, text if sep and name else None, remark))
        remark = None
    return out
