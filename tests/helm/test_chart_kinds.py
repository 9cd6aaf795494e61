"""The rendered chart is valid Kubernetes: helm lint (strict) reports no error, every built-in
kind passes kubernetes-validate in strict mode (unknown fields refused) for the oldest
Kubernetes the chart supports and the newest the validator knows, and the ServiceMonitor
matches the prometheus-operator CRD's schema (kept in data/: kubernetes-validate has none)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
from chart_render import CHART, CI_VALUES, Rendered, load_values
from kubernetes_validate.utils import latest_version

SERVICEMONITOR_SCHEMA = Path(__file__).parent / "data" / "servicemonitor-v1.schema.json"
OLDEST_SUPPORTED = "1.27.0"  # Chart.yaml kubeVersion


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint_strict_reports_no_error(values_file: Path) -> None:
    result = helm_python.lint(CHART, values=load_values(values_file), strict=True)
    assert result["errors"] == [], result
    assert [m for m in result["messages"] if m["severity"] > 1] == [], result


def test_helm_lint_reports_a_value_the_schema_refuses() -> None:
    """The lint call above can fail: a replica count of 0 is an error."""
    values = load_values(CI_VALUES[0]) | {"control": {"replicas": 0}}
    result = helm_python.lint(CHART, values=values, strict=True)
    assert any("/control/replicas" in e for e in result["errors"]), result


def _builtin(rendered: Rendered) -> list[dict[str, Any]]:
    return [d for d in rendered.docs if not d["apiVersion"].startswith("monitoring.coreos.com")]


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, latest_version()])
def test_every_builtin_kind_passes_kubernetes_validate_strict(ci_rendered: Rendered,
                                                             version: str) -> None:
    docs = _builtin(ci_rendered)
    assert {"Deployment", "Job", "Service", "ServiceAccount"} <= {d["kind"] for d in docs}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validate_strict_refuses_an_unknown_field(full: Rendered) -> None:
    """The check above can fail: a misspelt field in a pod's security context is refused."""
    doc = copy.deepcopy(full.one("Deployment", "ql3-qinglong-control"))
    doc["spec"]["template"]["spec"]["securityContext"]["runAsNonroot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, OLDEST_SUPPORTED, strict=True)


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused wherever it lists properties (what
    kubectl's strict field validation does against a structural schema)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _servicemonitor_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SERVICEMONITOR_SCHEMA.read_text())["openAPIV3Schema"]
    return jsonschema.Draft7Validator(_strict(schema))


def test_the_servicemonitor_matches_the_prometheus_operator_crd(full: Rendered) -> None:
    (monitor,) = full.kinds("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    errors = [e.message for e in _servicemonitor_validator().iter_errors(monitor)]
    assert errors == []
    service = full.one("Service", "ql3-qinglong-control")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == \
        [p["name"] for p in service["spec"]["ports"]]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_the_crd_schema_refuses_a_misspelt_servicemonitor(full: Rendered) -> None:
    """The check above can fail: ``endpoint`` for ``endpoints``, a bad interval."""
    monitor = copy.deepcopy(full.kinds("ServiceMonitor")[0])
    monitor["spec"]["endpoint"] = monitor["spec"].pop("endpoints")
    assert list(_servicemonitor_validator().iter_errors(monitor))
    monitor = copy.deepcopy(full.kinds("ServiceMonitor")[0])
    monitor["spec"]["endpoints"][0]["interval"] = "thirty seconds"
    assert list(_servicemonitor_validator().iter_errors(monitor))


def test_no_servicemonitor_unless_enabled(minimal: Rendered) -> None:
    assert minimal.kinds("ServiceMonitor") == []
