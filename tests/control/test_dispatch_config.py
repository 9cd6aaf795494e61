"""DispatchConfig refuses a heartbeat above a third of the lease at construction (case C11)."""

from __future__ import annotations

import pytest

from qinglong.control.dispatch.config import DispatchConfig, InvalidDispatchConfigError


def test_heartbeat_above_a_third_of_the_lease_is_refused_with_both_numbers() -> None:
    with pytest.raises(InvalidDispatchConfigError) as err:
        DispatchConfig(lease_ms=30_000, heartbeat_ms=10_001)
    assert "10001" in str(err.value) and "30000" in str(err.value)


def test_heartbeat_of_exactly_a_third_is_accepted() -> None:
    config = DispatchConfig(lease_ms=30_000, heartbeat_ms=10_000)
    assert (config.lease_ms, config.heartbeat_ms) == (30_000, 10_000)


@pytest.mark.parametrize("kwargs", [{"heartbeat_ms": 0}, {"lease_ms": 10},
                                    {"max_claim": 65}, {"upload_url_ttl_s": 5}])
def test_out_of_range_settings_are_refused(kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidDispatchConfigError):
        DispatchConfig(**kwargs)
