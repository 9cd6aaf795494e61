"""A 422 says what a field allows in words, never as the schema's regular expression
(``control/api/errors.py``: ``PATTERN_WORDS``): every pattern the API declares has words of
its own, and none of them quotes a regex."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi")

from qinglong.control.api.app import build_app
from qinglong.control.api.context import ApiContext
from qinglong.control.api.errors import reason
from qinglong.shared.names import NAME_RULE


def declared_patterns(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {str(node["pattern"])} if isinstance(node.get("pattern"), str) else set()
        return found.union(*(declared_patterns(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(declared_patterns(v) for v in node))
    return set()


def test_every_declared_pattern_is_said_in_words() -> None:
    document = build_app(ApiContext(engine=None, project_id="p")).openapi()  # type: ignore[arg-type]
    patterns = declared_patterns(document)
    assert r"^[a-z0-9][a-z0-9_.-]{0,62}$" in patterns  # pool names, at least
    for pattern in patterns:
        words = reason("string_pattern_mismatch", {"pattern": pattern})
        assert words != reason("string_pattern_mismatch", {"pattern": "^x+$"}), pattern
        assert not any(mark in words for mark in ("^", "$", "[", "{", "\\")), words


def test_a_task_name_reads_as_what_is_allowed() -> None:
    # task names follow shared/names.py's rule, checked by a validator of ours: its words
    # (letters or digits of any language, 汉字 named) are shown as they are
    assert reason("value_error", {"error": NAME_RULE}) == NAME_RULE
    assert "letters or digits of any language" in NAME_RULE and "京东签到" in NAME_RULE
    unknown = "contains characters that are not allowed here"  # a pattern without words
    assert reason("string_pattern_mismatch", {"pattern": "^x+$"}) == unknown
    assert reason("string_pattern_mismatch", None) == unknown


def test_a_too_long_task_name_reads_as_the_one_name_rule_whatever_its_length() -> None:
    """shared/names.py allows 1-128 characters; a longer name, 200 or 600 characters, is
    refused with that rule's words (no second limit with other numbers)."""
    from pydantic import TypeAdapter, ValidationError

    from qinglong.control.api.task_models import TaskName

    adapter = TypeAdapter(TaskName)
    assert adapter.validate_python("京东签到") == "京东签到"
    for name in ("签" * 200, "x" * 600, ""):
        with pytest.raises(ValidationError) as caught:
            adapter.validate_python(name)
        (error,) = caught.value.errors()
        assert reason(error["type"], error.get("ctx")) == NAME_RULE, error
