"""NetworkPolicies cover every pod the chart makes (issue: a default-deny namespace left the
migration Job without DNS or PostgreSQL and the helm test without control): the migration's
policy is a hook created before the Job, allowing only DNS and PostgreSQL; the test pod's
allows only DNS and control's port. Each policy's selector matches the labels the pods
actually carry."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
from chart_render import CI_VALUES, Rendered, load_values, pod_specs, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")

DNS_PORTS = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


def _pod_labels(owner: dict[str, Any]) -> dict[str, str]:
    if owner["kind"] == "Pod":
        return owner["metadata"]["labels"]
    return owner["spec"]["template"]["metadata"]["labels"]


def _selecting(rendered: Rendered, labels: dict[str, str]) -> list[dict[str, Any]]:
    return [p for p in rendered.kinds("NetworkPolicy")
            if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]


def test_every_pod_is_selected_by_a_policy(full: Rendered) -> None:
    owners = [owner for owner, _ in pod_specs(full.docs)]
    assert {o["kind"] for o in owners} == {"Deployment", "Job", "Pod"}
    for owner in owners:
        where = f"{owner['kind']}/{owner['metadata']['name']}"
        assert len(_selecting(full, _pod_labels(owner))) == 1, where


def test_the_migration_reaches_only_dns_and_postgres_from_before_the_job(
        full: Rendered) -> None:
    (job,) = full.kinds("Job")
    (policy,) = _selecting(full, _pod_labels(job))
    assert policy["metadata"]["name"] == "ql3-qinglong-migrate"
    hook = policy["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"
    # gone once the hooks succeeded (a later install with networkPolicy.enabled false must
    # not find it still confining the migration), replaced at the next run otherwise
    assert hook["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    assert int(hook["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"])
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    dns, postgres = spec["egress"]
    assert dns["ports"] == DNS_PORTS
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert postgres == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
                        "ports": [{"port": 5432, "protocol": "TCP"}]}


def test_the_helm_test_reaches_only_dns_and_controls_port(full: Rendered) -> None:
    pod = full.one("Pod", "ql3-qinglong-test")
    (policy,) = _selecting(full, _pod_labels(pod))
    assert policy["metadata"]["name"] == "ql3-qinglong-test"
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    dns, control = spec["egress"]
    assert dns["ports"] == DNS_PORTS
    assert control["ports"] == [{"port": 8080, "protocol": "TCP"}]
    (peer,) = control["to"]
    control_pods = _pod_labels(full.one("Deployment", "ql3-qinglong-control"))
    assert peer["podSelector"]["matchLabels"].items() <= control_pods.items()
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "control"


def test_no_test_policy_without_a_test_pod(minimal: Rendered) -> None:
    assert minimal.kinds("Pod") == [] and minimal.kinds("NetworkPolicy") == []


def _network_values(**np: Any) -> dict[str, Any]:
    values = load_values(MINIMAL)
    values["networkPolicy"] = {"enabled": True,
                               "bucket": {"to": [{"ipBlock": {"cidr": "10.30.1.0/24"}}]},
                               "postgres": {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]},
                               **np}
    return values


def test_control_extra_egress_reaches_its_cloud_identity() -> None:
    """With a restricted bucket.to, control's credentials (IRSA's STS on 443, the instance
    metadata service on 80) need networkPolicy.controlExtraEgress: appended to control's
    egress after DNS, PostgreSQL and the bucket, in the order given; the workers' policy
    does not get them."""
    extra = [{"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}],
              "ports": [{"port": 80, "protocol": "TCP"}]},
             {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
              "ports": [{"port": 443, "protocol": "TCP"}]}]
    rendered = render(_network_values(controlExtraEgress=extra))
    egress = rendered.one("NetworkPolicy", "ql3-qinglong-control")["spec"]["egress"]
    assert len(egress) == 5 and egress[3:] == extra
    worker = rendered.one("NetworkPolicy", "ql3-qinglong-worker")["spec"]["egress"]
    assert not any(rule in worker for rule in extra)
    default = render(_network_values())
    assert len(default.one("NetworkPolicy", "ql3-qinglong-control")["spec"]["egress"]) == 3


@pytest.mark.parametrize("key", ["controlExtraEgress", "workerExtraEgress"])
@pytest.mark.parametrize(("rule", "expect"), [
    ({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "port": 443}, "'port' not allowed"),
    ({"ports": [{"port": 443, "protocol": "HTTP"}]}, "protocol"),
    ({"ports": [{"prot": 443}]}, "'prot' not allowed"),
])
def test_a_misspelt_extra_egress_rule_is_refused(key: str, rule: dict[str, Any],
                                                 expect: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as caught:
        render(_network_values(**{key: [rule]}))
    assert f"/networkPolicy/{key}/0" in str(caught.value) and expect in str(caught.value)
