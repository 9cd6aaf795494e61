"""The environment size limits shared by local and cluster global variables
(shared/qinglong/shared/variable_limits.py): one NAME=value entry with its NUL at most
MAX_ARG_STRLEN, all of them within the caller's budget; refusals name the variable, never
the value."""

from __future__ import annotations

import pytest

from qinglong.shared.errors import ValidationError
from qinglong.shared.variable_limits import (
    VARIABLE_MAX_BYTES,
    check_settable_name,
    check_variables_size,
    entry_bytes,
    reserved_name_problem,
)


def check(env: dict[str, str], budget: int = 1 << 20) -> None:
    check_variables_size(env, field="value", total_max_bytes=budget,
                         total_what="the variables of a pool")


def test_an_entry_counts_name_equals_value_and_its_nul_in_utf8_bytes() -> None:
    assert VARIABLE_MAX_BYTES == 128 * 1024
    assert entry_bytes("JD_COOKIE", "甲") == len("JD_COOKIE=") + 3 + 1


def test_one_variable_at_the_limit_passes_one_byte_more_is_refused_without_its_value() -> None:
    room = VARIABLE_MAX_BYTES - len("CK=") - 1
    check({"CK": "x" * room})
    with pytest.raises(ValidationError) as caught:
        check({"CK": "秘" + "x" * (room - 2)})  # 3 bytes for one character: one over
    assert caught.value.field == "value"
    assert f"CK would be {VARIABLE_MAX_BYTES + 1} bytes" in str(caught.value)
    assert "秘" not in str(caught.value)


def test_all_variables_together_stay_within_the_budget() -> None:
    env = {f"V{i}": "y" * 95 for i in range(10)}  # 10 entries of 3 + 95 + 1 = 99 bytes
    check(env, budget=990)
    with pytest.raises(ValidationError, match="the variables of a pool are limited to 989"):
        check(env, budget=989)


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_", "QL3_X",
                                  "QL3_LAUNCH_RUN_ID"])
def test_path_the_loaders_and_the_runtimes_names_are_refused_naming_the_field(
        name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        check_settable_name(name, "name")
    assert caught.value.field == "name" and name in str(caught.value)


@pytest.mark.parametrize("name", ["NODE_OPTIONS", "HOME", "LANG", "JD_COOKIE", "PATHS",
                                  "MY_PATH", "path", "ld_preload", "OLD_X", "QL3", "QL_DIR"])
def test_other_names_stay_settable(name: str) -> None:
    assert reserved_name_problem(name) is None
    assert check_settable_name(name) == name
