import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.shared.errors import InvalidIdentifierError
from qinglong.shared.ids import uuid7, uuid7_time_ms, validate_uuid7


def test_uuid7_has_version_7_and_variant_10() -> None:
    value = uuid7()
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert (parsed.int >> 62) & 0b11 == 0b10
    assert validate_uuid7(value) == value


def test_uuid7_sorts_in_creation_order_within_one_millisecond() -> None:
    before = int(time.time() * 1000)
    ids = [uuid7() for _ in range(5000)]
    after = int(time.time() * 1000)
    assert ids == sorted(ids)
    assert len(set(ids)) == 5000
    assert before <= uuid7_time_ms(ids[0]) <= uuid7_time_ms(ids[-1]) <= after + 1


@pytest.mark.parametrize(
    "bad",
    [
        str(uuid.uuid4()),
        "not-a-uuid",
        str(uuid.UUID(uuid7())).upper(),
        "",
        None,
        42,
        "{" + uuid7()[1:],
    ],
    # stable ids: pytest-xdist needs every worker to collect the same names
    ids=["uuid4", "not-a-uuid", "upper-case", "empty", "none", "int", "brace"],
)
def test_validate_uuid7_rejects(bad: object) -> None:
    with pytest.raises(InvalidIdentifierError):
        validate_uuid7(bad)


@given(st.uuids())
def test_validate_uuid7_accepts_only_v7_variant_10(value: uuid.UUID) -> None:
    text = str(value)
    ok = value.version == 7 and (value.int >> 62) & 0b11 == 0b10
    if ok:
        assert validate_uuid7(text) == text
    else:
        with pytest.raises(InvalidIdentifierError):
            validate_uuid7(text)
