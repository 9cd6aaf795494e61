"""Rendering the Helm chart offline (helm-python-sdk, no helm binary) for the chart checks
(tests/helm) and the sandboxed runs (integration/helm).

``render`` returns the manifests as parsed documents plus NOTES.txt; ``pod_specs`` walks every
pod template (Deployments, Jobs, bare Pods) with the object that holds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "qinglong"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE, NAMESPACE = "ql3", "tasks"


@dataclass(frozen=True)
class Rendered:
    """One rendering: ``docs`` (every non-empty YAML document, template order) and
    ``notes`` (NOTES.txt as rendered)."""

    docs: list[dict[str, Any]]
    notes: str

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [d for d in self.kinds(kind) if d["metadata"]["name"] == name]
        return found


def load_values(path: Path) -> dict[str, Any]:
    values = yaml.safe_load(path.read_text()) or {}
    assert isinstance(values, dict)
    return values


def render(values: dict[str, Any], *, release: str = RELEASE,
           namespace: str = NAMESPACE) -> Rendered:
    """The chart rendered with ``values`` over values.yaml, as an install would. Raises the
    SDK's HelmValuesError (schema) or HelmRenderError (a template's ``required``/``fail``)."""
    files = helm_python.Chart.load(CHART).render(values=values, name=release,
                                                 namespace=namespace, is_install=True)
    docs: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(files.items(), key=lambda kv: kv[0]):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return Rendered(docs, notes)


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(owning object, pod spec) for every Deployment, Job and Pod in ``docs``."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            yield doc, doc["spec"]["template"]["spec"]
        elif doc["kind"] == "Pod":
            yield doc, doc["spec"]


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Init containers first, then containers (the order a pod runs them in)."""
    return [*spec.get("initContainers", []), *spec["containers"]]
