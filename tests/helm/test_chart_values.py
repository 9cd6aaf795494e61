"""values.schema.json refuses bad values before anything renders, and the templates refuse
what a schema cannot express (a setting required at install, a heartbeat longer than a third
of the lease, a pool given twice, one token Secret key shared by two pools or a pool and the
bootstrap admin), each with a message naming the setting."""

from __future__ import annotations

import re
from pathlib import Path

import helm_python
import pytest
from chart_render import CI_VALUES, load_values, render

BAD = sorted((Path(__file__).parent / "data" / "bad-values").glob("*.yaml"))
MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _merged(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


@pytest.mark.parametrize("bad_file", BAD, ids=lambda p: p.stem)
def test_a_bad_values_file_is_rejected_by_the_schema(bad_file: Path) -> None:
    """Each file in data/bad-values, over the otherwise valid minimal values, is refused
    by the schema with the error its first line expects."""
    expected = re.match(r"# expect: (.+)", bad_file.read_text()).group(1)  # type: ignore[union-attr]
    values = _merged(load_values(MINIMAL), load_values(bad_file))
    with pytest.raises(helm_python.HelmValuesError) as caught:
        render(values)
    assert expected in str(caught.value)


def test_the_bad_files_are_valid_without_their_one_mistake() -> None:
    """The minimal values they extend render, so each refusal is its own mistake's."""
    assert len(BAD) >= 8
    assert render(load_values(MINIMAL)).kinds("Deployment")


@pytest.mark.parametrize(("missing", "message"), [
    ({"database": {"runtime": {"existingSecret": ""}}}, "database.runtime.existingSecret"),
    ({"database": {"migration": {"existingSecret": ""}}}, "database.migration.existingSecret"),
    ({"logs": {"bucket": ""}}, "logs.bucket: the bucket of the workers' logs"),
    ({"worker": {"pools": [{"name": "default", "token": {"existingSecret": ""}}]}},
     "worker.pools[default].token.existingSecret"),
])
def test_a_setting_an_install_needs_is_named_when_missing(missing: dict, message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError) as caught:
        render(_merged(load_values(MINIMAL), missing))
    assert message in str(caught.value)


def test_the_defaults_alone_do_not_render() -> None:
    with pytest.raises(helm_python.HelmRenderError) as caught:
        render({})
    assert "existingSecret" in str(caught.value)


@pytest.mark.parametrize(("extra", "message"), [
    ({"control": {"heartbeatMs": 15_000, "leaseMs": 30_000}},
     "heartbeatMs must be at most a third of control.leaseMs"),
    ({"worker": {"pools": [{"name": "a", "token": {"existingSecret": "s1"}},
                           {"name": "a", "token": {"existingSecret": "s2"}}]}},
     'the pool name "a" is given twice'),
    ({"worker": {"pools": [{"name": "a", "token": {"existingSecret": "s1"},
                            "autoscaling": {"enabled": True, "minReplicas": 5,
                                            "maxReplicas": 2}}]}},
     "minReplicas is above maxReplicas"),
    ({"worker": {"pools": [{"name": "a", "token": {"existingSecret": "s1"}},
                           {"name": "b", "token": {"existingSecret": "s2"}},
                           {"name": "c", "token": {"existingSecret": "s1", "key": "token"}}]}},
     "worker.pools[c].token uses the Secret key s1/token of worker.pools[a].token: each "
     "pool needs its own token Secret"),
    ({"worker": {"token": {"key": "TOKEN"},
                 "pools": [{"name": "a", "token": {"existingSecret": "s1"}},
                           {"name": "b", "token": {"existingSecret": "s1", "key": "TOKEN"}}]}},
     "worker.pools[b].token uses the Secret key s1/TOKEN of worker.pools[a].token"),
    ({"bootstrapAdmin": {"existingSecret": "shared"},
      "worker": {"pools": [{"name": "a", "token": {"existingSecret": "shared"}}]}},
     "worker.pools[a].token uses the Secret key shared/token of bootstrapAdmin"),
])
def test_the_templates_refuse_what_the_schema_cannot_express(extra: dict, message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError) as caught:
        render(_merged(load_values(MINIMAL), extra))
    assert message in str(caught.value)
