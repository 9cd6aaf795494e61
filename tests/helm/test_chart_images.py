"""Image references: ``repository:tag`` (the tag defaults to the chart's appVersion), or
``repository@digest`` when ``image.<part>.digest`` is set (the digest pins the image; the
tag is then not rendered). Every container of a part uses the same reference."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, Rendered, containers, load_values, pod_specs, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")
CONTROL_DIGEST = "sha256:" + "0123456789abcdef" * 4
WORKER_DIGEST = "sha256:" + "fedcba9876543210" * 4  # ci/full-values.yaml


def _images(rendered: Rendered) -> dict[str, set[str]]:
    """Component label of each pod: the images its containers run."""
    out: dict[str, set[str]] = {}
    for owner, spec in pod_specs(rendered.docs):
        component = owner["metadata"]["labels"]["app.kubernetes.io/component"]
        out.setdefault(component, set()).update(c["image"] for c in containers(spec))
    return out


def test_a_digest_replaces_the_tag(full: Rendered) -> None:
    images = _images(full)
    assert images["worker"] == {f"registry.example.com/qinglong-worker@{WORKER_DIGEST}"}
    assert images["control"] == {"registry.example.com/qinglong-control:3.0.0a1-r1"}


def test_a_control_digest_pins_control_the_migration_and_the_test() -> None:
    values: dict[str, Any] = load_values(MINIMAL)
    values["image"] = {"control": {"repository": "r.example/qc", "tag": "ignored",
                                   "pullPolicy": "IfNotPresent", "digest": CONTROL_DIGEST}}
    values["bootstrapAdmin"] = {"existingSecret": "ql3-admin"}
    images = _images(render(values))
    for component in ("control", "migrate", "test"):
        assert images[component] == {f"r.example/qc@{CONTROL_DIGEST}"}, component
    assert images["worker"] == {"qinglong-worker:3.0.0a1"}  # no digest: tag (appVersion)
