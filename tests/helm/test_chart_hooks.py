"""The hook pods (the migration Job, the helm test pod): their arguments survive any value
the schema allows (every templated argument is quoted), and they are scheduled like
control unless ``migration.*`` / ``tests.*`` say otherwise."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, containers, load_values, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _job_steps(values: dict[str, Any]) -> dict[str, list[str]]:
    (job,) = render(values).kinds("Job")
    return {c["name"]: c["args"] for c in containers(job["spec"]["template"]["spec"])}


def test_an_admin_name_yaml_would_misread_is_passed_as_written() -> None:
    """``ops: admin #1`` unquoted is a mapping with a comment; quoted, one argument."""
    values = load_values(MINIMAL)
    values["bootstrapAdmin"] = {"existingSecret": "ql3-admin", "name": "ops: admin #1"}
    args = _job_steps(values)["token-bootstrap-admin"]
    assert args == ["control", "token", "import", "--ensure", "--name=ops: admin #1",
                    "--scope=admin", "--token-file=/run/secrets/qinglong/admin/token"]


PLACEMENT = {"nodeSelector": {"pool": "system"},
             "tolerations": [{"key": "system", "operator": "Exists"}],
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
             "podAnnotations": {"example.com/owner": "platform"},
             "podLabels": {"example.com/team": "platform"}}


def _hook_pods(values: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """component (migrate, test): (pod metadata, pod spec)."""
    rendered = render(values)
    (job,) = rendered.kinds("Job")
    (pod,) = rendered.kinds("Pod")
    return {"migrate": (job["spec"]["template"]["metadata"], job["spec"]["template"]["spec"]),
            "test": (pod["metadata"], pod["spec"])}


def _placed(values: dict[str, Any]) -> dict[str, Any]:
    values = load_values(MINIMAL) | values
    values["bootstrapAdmin"] = {"existingSecret": "ql3-admin"}  # so a test pod is rendered
    return values


def test_hook_pods_are_placed_like_control_by_default() -> None:
    for component, (meta, spec) in _hook_pods(_placed({"control": PLACEMENT})).items():
        assert spec["nodeSelector"] == PLACEMENT["nodeSelector"], component
        assert spec["tolerations"] == PLACEMENT["tolerations"], component
        assert spec["affinity"] == PLACEMENT["affinity"], component
        assert meta["annotations"]["example.com/owner"] == "platform", component
        # never control's labels: a selector written for control's pods (a Service, a
        # PodMonitor) must not pick up the migration or the test pod
        assert "example.com/team" not in meta["labels"], component
        assert meta["labels"]["app.kubernetes.io/component"] == component


def test_migration_and_tests_values_replace_controls() -> None:
    own = {"nodeSelector": {"pool": "batch"}, "tolerations": [{"key": "batch",
                                                               "operator": "Exists"}],
           "affinity": {"podAntiAffinity": {}}, "podAnnotations": {"example.com/a": "b"},
           "podLabels": {"example.com/l": "m"}}
    pods = _hook_pods(_placed({"control": PLACEMENT, "migration": own, "tests": own}))
    for component, (meta, spec) in pods.items():
        assert spec["nodeSelector"] == {"pool": "batch"}, component
        assert spec["tolerations"] == own["tolerations"], component
        assert spec["affinity"] == {"podAntiAffinity": {}}, component
        assert meta["annotations"]["example.com/a"] == "b", component
        assert "example.com/owner" not in meta["annotations"], component
        assert meta["labels"]["example.com/l"] == "m", component
        assert "example.com/team" not in meta["labels"], component
    assert pods["test"][0]["annotations"]["helm.sh/hook"] == "test"


def test_hook_pods_without_any_placement_have_none(minimal: Any) -> None:
    (job,) = minimal.kinds("Job")
    spec = job["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "affinity"} & set(spec)
    assert "annotations" not in job["spec"]["template"]["metadata"]
