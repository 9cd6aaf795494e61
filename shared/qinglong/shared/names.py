"""Task names and label values as people write them, shared by ``ql3 local`` and control
(docs/protocols.md §4.5 "Names"). Stdlib only (``unicodedata``).

The rule (:func:`check_name`):

- the text is NFC-normalized first (what is stored is the NFC form);
- 1–128 characters;
- letters, digits and marks of any script (Unicode categories L*, N*, M*: ``京东签到``,
  ``backup.daily``, ``Ä``), plus ``' '``, ``'.'``, ``'_'`` and ``'-'`` inside the name;
  the first character a letter or digit (so a name never reads as a command-line option),
  the last never a space;
- nothing else: no control, format (zero-width) or private-use characters, no other
  punctuation, and in particular no ``/``, ``#`` or ``@`` (run-reference syntax:
  ``京东签到#3``, ``京东签到@last``).

Two names equal under NFKC case-folding are the same name (:func:`name_key`): full-width
and ASCII digits (``签到１`` / ``签到1``), ``Backup`` / ``backup``. Both databases keep a
unique index on that key, so the second one is refused as a duplicate.

Pool names keep their own ASCII rule (they name Kubernetes objects: ``shared/wire.py``).
"""

from __future__ import annotations

import unicodedata

from qinglong.shared.errors import ValidationError

MAX_NAME_CHARS = 128
_INSIDE = frozenset(" ._-")
NAME_RULE = (
    "use 1-128 characters: letters or digits of any language (汉字 such as 京东签到 "
    "are fine), with space, '.', '_' or '-' inside, starting with a letter or digit; "
    "not '/', '#', '@' or control characters"
)


def _allowed(char: str) -> bool:
    category = unicodedata.category(char)
    return category[0] in "LNM"


def name_problem(text: object) -> str | None:
    """Why ``text`` is not a valid name (one phrase), or None when it is (after NFC)."""
    if not isinstance(text, str):
        return "must be text"
    name = unicodedata.normalize("NFC", text)
    if not 1 <= len(name) <= MAX_NAME_CHARS:
        return "must be 1-128 characters"
    if name[0] == " " or name[-1] == " ":
        return "must not start or end with a space"
    if unicodedata.category(name[0])[0] not in "LN":
        return "must start with a letter or digit"
    for char in name:
        if not _allowed(char) and char not in _INSIDE:
            return "holds a character that is not allowed"
    return None


def check_name(text: object, field: str = "name") -> str:
    """``text`` NFC-normalized when it follows the rule (module docstring).

    Raises:
        ValidationError: ``field`` named, the message the rule in words (:data:`NAME_RULE`);
            the text itself is never echoed.
    """
    if name_problem(text) is not None:
        raise ValidationError(field, NAME_RULE)
    assert isinstance(text, str)
    return unicodedata.normalize("NFC", text)


def is_valid_name(text: object) -> bool:
    """Whether :func:`check_name` accepts ``text``."""
    return name_problem(text) is None


def name_key(text: str) -> str:
    """The uniqueness key of a name: NFKC of its case-fold (``Backup`` and ``backup``,
    ``签到１`` and ``签到1`` share one). Stored beside the name; a unique index on it makes
    a second task with an equal name a duplicate."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


_LABEL_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
LABEL_KEY_RULE = ("label keys: 1-63 ASCII letters, digits, '_', '.' or '-', starting with "
                  "a letter or digit")


def is_label_key(text: object) -> bool:
    """A label key: ``[A-Za-z0-9][A-Za-z0-9_.-]{0,62}`` (ASCII, as worker labels)."""
    return (isinstance(text, str) and 1 <= len(text) <= 63 and text[0].isascii()
            and text[0].isalnum() and all(c in _LABEL_KEY_CHARS for c in text))


MAX_LABELS = 32
FREE_LABEL_RULE = ("at most 32, each 1-128 characters without control characters, "
                   "not starting or ending with a space")
LABEL_PAIR_RULE = ("a label with '=' is key=value: it needs a key and a value, neither "
                   "empty nor starting or ending with a space (平台=京东); a label "
                   "without '=' is a word (日常)")


def check_free_labels(labels: object, field: str = "labels") -> tuple[str, ...]:
    """A local task's free-form labels (Qinglong 2.x 标签: ``日常``, ``env=prod``), NFC, in
    order, repeats dropped: at most :data:`MAX_LABELS`, each 1-128 characters, no control,
    format or private-use characters (Unicode categories C*), no leading or trailing space;
    one with ``=`` is ``key=value`` (``task list --label K=V`` and the panel's search
    filter by it), so both sides of its first ``=`` are non-empty and unpadded (``=``,
    ``a=``, ``=b``, ``a =b`` are refused). Raises ValidationError naming ``field``
    (:data:`FREE_LABEL_RULE`, :data:`LABEL_PAIR_RULE`); never echoes a label.
    Source rule: README "Tasks" (labels), integration/test_daily_use.py."""
    if isinstance(labels, str) or not isinstance(labels, list | tuple):
        raise ValidationError(field, FREE_LABEL_RULE)
    out: list[str] = []
    for label in labels:
        if not isinstance(label, str):
            raise ValidationError(field, FREE_LABEL_RULE)
        text = unicodedata.normalize("NFC", label)
        if (not 1 <= len(text) <= MAX_NAME_CHARS or text != text.strip()
                or any(unicodedata.category(c)[0] == "C" for c in text)):
            raise ValidationError(field, FREE_LABEL_RULE)
        key, sep, value = text.partition("=")
        if sep and not (key and value and key == key.rstrip() and value == value.lstrip()):
            raise ValidationError(field, LABEL_PAIR_RULE)
        if text not in out:
            out.append(text)
    if len(out) > MAX_LABELS:
        raise ValidationError(field, FREE_LABEL_RULE)
    return tuple(out)


def check_task_labels(labels: object, field: str = "labels") -> dict[str, str]:
    """A task's labels as ``{key: value}``: at most 32, keys as :func:`is_label_key`, values
    names (:func:`check_name`, stored NFC). Raises ValidationError naming ``field``."""
    if not isinstance(labels, dict) or len(labels) > 32:
        raise ValidationError(field, "must be at most 32 labels key=value")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not is_label_key(key):
            raise ValidationError(field, LABEL_KEY_RULE)
        out[key] = check_name(value, field)
    return out
