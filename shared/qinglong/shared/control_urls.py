"""Control base URLs as a worker or ``ql3 cluster`` takes them (docs/protocols.md §4.2,
§4.5): ``--control-url`` / ``QL3_CONTROL_URL`` hold one base URL or several replicas' base
URLs separated by commas, in the order tried. Stdlib only."""

from __future__ import annotations

from qinglong.shared.errors import ValidationError


def parse_control_urls(text: str, option: str = "--control-url") -> list[str]:
    """The base URLs of ``text`` (comma-separated, blanks dropped, order kept).

    Raises ValidationError naming ``option`` (exit 2) for an empty list, a URL that is not
    http(s)://host..., one ending in ``/v1`` (the API path is added by the caller) or a URL
    given twice.
    """
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if not urls:
        raise ValidationError(option, "give at least one http(s):// base URL")
    for url in urls:
        if not url.startswith(("http://", "https://")) or len(url) < 10:
            raise ValidationError(option, f"must be an http(s):// URL: {url!r}")
        if url.rstrip("/").endswith("/v1"):
            raise ValidationError(option, f"{url!r} ends in /v1: give the control "
                                  "base URL, without /v1 (e.g. http://host:8080)")
    if len({u.rstrip("/") for u in urls}) != len(urls):
        raise ValidationError(option, "a base URL is given twice")
    return urls
