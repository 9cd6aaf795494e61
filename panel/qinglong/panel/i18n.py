"""Message catalogs (docs/panel.md "Languages"): zh-CN by default, English second.

One JSON file per language in ``messages/``, the same keys in each
(tests/panel/test_catalogs.py fails on a key missing from either). The language of a request:
the remembered switch (cookie ``ql3_lang``) if set, else the first supported language of
``Accept-Language``, else zh-CN.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from markupsafe import Markup, escape

LANGUAGES = ("zh-CN", "en")
DEFAULT = "zh-CN"
COOKIE = "ql3_lang"


@cache
def catalog(lang: str) -> dict[str, str]:
    """The messages of ``lang`` (one of LANGUAGES), key -> text. Raises KeyError otherwise."""
    if lang not in LANGUAGES:
        raise KeyError(lang)
    text = resources.files("qinglong.panel").joinpath(f"messages/{lang}.json").read_text("utf-8")
    return dict(json.loads(text))


def negotiate(cookie: str | None, accept_language: str | None) -> str:
    """The language for a request: cookie, then Accept-Language (q-values honoured), then
    zh-CN. ``zh``, ``zh-Hans``, ``zh-CN`` map to zh-CN; ``en-*`` to en."""
    if cookie in LANGUAGES:
        return str(cookie)
    choices: list[tuple[float, int, str]] = []
    for index, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        lang = _supported(tag.strip().lower())
        if lang and q > 0:
            choices.append((-q, index, lang))
    return sorted(choices)[0][2] if choices else DEFAULT


def _supported(tag: str) -> str | None:
    if tag == "zh" or tag.startswith("zh-"):
        return "zh-CN"
    if tag == "en" or tag.startswith("en-"):
        return "en"
    return None


def code_spans(text: str) -> Markup:
    """A catalog message as HTML (the Jinja filter ``codes``): each `backticked` span, a
    command the reader types, becomes a ``<code>`` element and everything is escaped;
    a message with an unpaired backtick is escaped whole."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:
        return escape(text)
    return Markup("").join(Markup("<code>{}</code>").format(part) if odd else escape(part)
                           for odd, part in ((i % 2 == 1, p) for i, p in enumerate(parts)))
