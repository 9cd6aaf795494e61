"""The chart rendered once per values file of helm/qinglong/ci for the whole session."""

from __future__ import annotations

import pytest
from chart_render import CI_VALUES, Rendered, load_values, render

_CACHE: dict[str, Rendered] = {}


def rendered_ci(name: str) -> Rendered:
    """The chart rendered with ci/``name`` (each file once per session)."""
    if name not in _CACHE:
        _CACHE[name] = render(load_values(CI_VALUES[0].parent / name))
    return _CACHE[name]


@pytest.fixture(params=[p.name for p in CI_VALUES])
def ci_rendered(request: pytest.FixtureRequest) -> Rendered:
    """The chart rendered with each ci/*-values.yaml in turn."""
    return rendered_ci(request.param)


@pytest.fixture
def full() -> Rendered:
    """ci/full-values.yaml: every optional part on."""
    return rendered_ci("full-values.yaml")


@pytest.fixture
def minimal() -> Rendered:
    """ci/minimal-values.yaml: the least an install needs."""
    return rendered_ci("minimal-values.yaml")
