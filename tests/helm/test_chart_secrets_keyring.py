"""The keyring sealing secret values at rest (docs/operations.md "Secret values at rest"):
with ``secrets.keyring.existingSecret`` the control pods, and only they, mount that Secret's
key read-only (0400) and name the file in ``QL3_SECRETS_KEYRING`` (``ql3 control serve
--secrets-keyring``); without it nothing is mounted. The schema refuses a malformed name."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
from chart_render import CI_VALUES, Rendered, containers, load_values, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _render(keyring: dict[str, Any] | None) -> Rendered:
    values = load_values(MINIMAL)
    if keyring is not None:
        values["secrets"] = {"keyring": keyring}
    return render(values)


def _by_component(rendered: Rendered) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in rendered.kinds("Deployment"):
        out.setdefault(d["metadata"]["labels"]["app.kubernetes.io/component"], []).append(d)
    return out


def test_control_pods_mount_the_keyring_secret_read_only_and_workers_do_not() -> None:
    rendered = _render({"existingSecret": "ql3-keyring", "key": "ring.json"})
    deployments = _by_component(rendered)
    (control,) = deployments["control"]
    spec = control["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "keyring"]
    assert volume["secret"] == {"secretName": "ql3-keyring", "defaultMode": 0o400,
                                "items": [{"key": "ring.json", "path": "ring.json"}]}
    (container,) = [c for c in containers(spec) if c["name"] == "control"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "keyring"]
    assert mount == {"name": "keyring", "mountPath": "/etc/ql3/keyring", "readOnly": True}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["QL3_SECRETS_KEYRING"] == "/etc/ql3/keyring/ring.json"
    for worker in deployments["worker"]:
        wspec = worker["spec"]["template"]["spec"]
        assert "ql3-keyring" not in str(wspec)
        assert all("QL3_SECRETS_KEYRING" not in str(c.get("env")) for c in containers(wspec))


def test_without_a_keyring_secret_nothing_is_mounted() -> None:
    (control,) = _by_component(_render(None))["control"]
    spec = control["spec"]["template"]["spec"]
    assert all(v["name"] != "keyring" for v in spec["volumes"])
    assert "QL3_SECRETS_KEYRING" not in str(spec)


@pytest.mark.parametrize("keyring", [{"existingSecret": "Bad_Name"}, {"key": "a/b"},
                                     {"existingSecret": "ok", "other": 1}])
def test_the_schema_refuses_a_malformed_keyring_setting(keyring: dict[str, Any]) -> None:
    with pytest.raises(helm_python.HelmValuesError):
        _render(keyring)
