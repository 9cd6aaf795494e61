"""Which identity each pod runs as: control keeps the ServiceAccount that may carry the
bucket role (IRSA / Workload Identity annotations), workers and the helm test (which run
user task code, or hold only an API token) get their own ServiceAccount without it, and the
migration Job its hook ServiceAccount. No ServiceAccount mounts an API token."""

from __future__ import annotations

from typing import Any

from chart_render import CI_VALUES, Rendered, load_values, pod_specs, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")
CONTROL_ROLE = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/ql3"}


def _accounts(rendered: Rendered) -> dict[str, str]:
    """kind/name of each pod-bearing object: the ServiceAccount its pods run as."""
    return {f"{owner['kind']}/{owner['metadata']['name']}": spec["serviceAccountName"]
            for owner, spec in pod_specs(rendered.docs)}


def test_workers_and_the_test_pod_do_not_get_the_control_role(full: Rendered) -> None:
    accounts = _accounts(full)
    assert accounts == {
        "Deployment/ql3-qinglong-control": "ql3-qinglong",
        "Deployment/ql3-qinglong-worker-default": "ql3-qinglong-worker",
        "Deployment/ql3-qinglong-worker-gpu": "ql3-qinglong-worker",
        "Deployment/ql3-qinglong-worker-spare": "ql3-qinglong-worker",
        "Job/ql3-qinglong-migrate": "ql3-qinglong-migrate",
        "Pod/ql3-qinglong-test": "ql3-qinglong-worker",
    }
    control = full.one("ServiceAccount", "ql3-qinglong")
    worker = full.one("ServiceAccount", "ql3-qinglong-worker")
    assert control["metadata"]["annotations"] == CONTROL_ROLE
    assert worker["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/ql3-worker"}
    assert worker["automountServiceAccountToken"] is False
    assert worker["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"


def test_the_worker_account_is_created_without_annotations_by_default(
        minimal: Rendered) -> None:
    worker = minimal.one("ServiceAccount", "ql3-qinglong-worker")
    assert "annotations" not in worker["metadata"]
    assert worker["automountServiceAccountToken"] is False
    assert _accounts(minimal)["Deployment/ql3-qinglong-worker-default"] == \
        "ql3-qinglong-worker"


def test_a_worker_account_made_elsewhere_is_used_by_name() -> None:
    values: dict[str, Any] = load_values(MINIMAL)
    values["serviceAccount"] = {"annotations": CONTROL_ROLE,
                                "worker": {"create": False, "name": "tasks-runner"}}
    rendered = render(values)
    assert [a["metadata"]["name"] for a in rendered.kinds("ServiceAccount")] == [
        "ql3-qinglong-migrate", "ql3-qinglong"]
    accounts = _accounts(rendered)
    assert accounts["Deployment/ql3-qinglong-worker-default"] == "tasks-runner"
    assert accounts["Deployment/ql3-qinglong-control"] == "ql3-qinglong"
