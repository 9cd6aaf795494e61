"""What the chart promises about its workloads (issue 14 item 1), read from the rendered
manifests of every ci values file: hardened pods, probes and drain-aware termination grace on
control, workers without database or bucket credentials, the migration hook's order, Secrets
only by reference, selectors that match."""

from __future__ import annotations

from typing import Any

import helm_python
import kubernetes_validate
import pytest
from chart_render import CI_VALUES, Rendered, containers, load_values, pod_specs, render
from kubernetes_validate.utils import latest_version
from test_chart_kinds import OLDEST_SUPPORTED

CONTROL = "ql3-qinglong-control"
MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _flag(args: list[str], name: str) -> str:
    (value,) = [a.partition("=")[2] for a in args if a.startswith(f"{name}=")]
    return value


UID_ISOLATION_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]


def _uid_isolated(container: dict[str, Any]) -> bool:
    return "--isolation=uid" in container.get("args", [])


def test_every_pod_runs_hardened(ci_rendered: Rendered) -> None:
    """Non-root with a fixed uid, read-only root, no privilege escalation, every capability
    dropped, seccomp RuntimeDefault, and no ServiceAccount token mounted — but a worker pool
    with ``isolation: uid`` (docs/protocols.md §4.8), which runs as root with exactly the six
    capabilities it needs (all within Pod Security baseline), still without escalation."""
    specs = list(pod_specs(ci_rendered.docs))
    assert len(specs) >= 3
    for owner, spec in specs:
        where = f"{owner['kind']}/{owner['metadata']['name']}"
        assert spec["automountServiceAccountToken"] is False, where
        pod = spec["securityContext"]
        isolated = any(_uid_isolated(c) for c in containers(spec))
        if isolated:
            assert pod["runAsNonRoot"] is False and pod["runAsUser"] == 0, where
        else:
            assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0, where
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for container in containers(spec):
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            if isolated:
                assert sc["capabilities"] == {"drop": ["ALL"], "add": UID_ISOLATION_CAPS}
            else:
                assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where


def test_writable_paths_are_only_the_charts_volumes(ci_rendered: Rendered) -> None:
    """Secrets and ConfigMaps are mounted read-only; whatever is writable is an emptyDir
    with a size limit."""
    for _, spec in pod_specs(ci_rendered.docs):
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in containers(spec):
            for mount in container.get("volumeMounts", []):
                volume = volumes[mount["name"]]
                if "emptyDir" in volume:
                    assert volume["emptyDir"]["sizeLimit"]
                else:
                    assert set(volume) & {"secret", "configMap"}
                    assert mount["readOnly"] is True


def test_no_secret_is_rendered_and_credentials_come_by_reference(
        ci_rendered: Rendered) -> None:
    assert ci_rendered.kinds("Secret") == []
    for _, spec in pod_specs(ci_rendered.docs):
        for container in containers(spec):
            for name, entry in _env(container).items():
                if name in ("QL3_DATABASE_URL", "QL3_WORKER_TOKEN", "QL3_TEST_TOKEN",
                            "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                    assert "secretKeyRef" in entry["valueFrom"], name
                    assert "value" not in entry, name


def test_control_has_probes_a_disruption_budget_and_spreads(full: Rendered) -> None:
    deployment = full.one("Deployment", CONTROL)
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert deployment["spec"]["replicas"] == 5
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["args"][:2] == ["control", "serve"]
    drain = float(_flag(container["args"], "--drain-s"))
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert spec["terminationGracePeriodSeconds"] > pre_stop + drain
    assert _env(container)["QL3_LISTEN"]["value"] == "0.0.0.0:8080"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for constraint in spec["topologySpreadConstraints"]:
        assert constraint["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    assert {c["topologyKey"] for c in spec["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    budget = full.one("PodDisruptionBudget", CONTROL)
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    service = full.one("Service", CONTROL)
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_the_defaults_give_three_control_replicas(minimal: Rendered) -> None:
    assert minimal.one("Deployment", CONTROL)["spec"]["replicas"] == 3
    assert minimal.kinds("PodDisruptionBudget")


def test_workers_hold_only_their_pool_token(ci_rendered: Rendered) -> None:
    """No database URL and no bucket credentials; the token from the pool's Secret; a
    termination grace longer than the drain budget plus the TERM-to-KILL grace; all
    replicas of a pool share one Secret (no per-replica identity is configured: each
    process registers its own incarnation)."""
    workers = [d for d in ci_rendered.kinds("Deployment")
               if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"]
    assert workers
    for deployment in workers:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        env = _env(container)
        assert not any(n.startswith(("AWS_", "QL3_DATABASE")) for n in env), env
        assert "secretKeyRef" in env["QL3_WORKER_TOKEN"]["valueFrom"]
        assert "--name" not in " ".join(container["args"])
        assert container["args"][:2] == ["worker", "run"]
        budget = float(_flag(container["args"], "--drain-budget"))
        grace = float(_flag(container["args"], "--grace"))
        assert spec["terminationGracePeriodSeconds"] > budget + grace


def test_a_pool_with_labels_declares_them_and_autoscales(full: Rendered) -> None:
    gpu = full.one("Deployment", "ql3-qinglong-worker-gpu")
    (container,) = gpu["spec"]["template"]["spec"]["containers"]
    assert _flag(container["args"], "--labels") == "gpu=yes,zone=a"
    assert _flag(container["args"], "--concurrency") == "1"
    assert "replicas" not in gpu["spec"]  # the HPA owns it
    (hpa,) = full.kinds("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "ql3-qinglong-worker-gpu"}
    default = full.one("Deployment", "ql3-qinglong-worker-default")
    assert default["spec"]["replicas"] == 3


def test_the_migration_job_is_a_hook_that_migrates_then_imports_tokens(
        full: Rendered) -> None:
    (job,) = full.kinds("Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    spec = job["spec"]["template"]["spec"]
    steps = [c["name"] for c in containers(spec)]
    assert steps == ["migrate", "token-bootstrap-admin", "token-pool-default",
                     "token-pool-gpu", "token-pool-spare", "readiness"]
    for container in containers(spec):
        url = _env(container)["QL3_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert url == {"name": "ql3-db-owner", "key": "DATABASE_URL"}
    imports = containers(spec)[1:4]
    for container in imports:
        assert container["args"][:4] == ["control", "token", "import", "--ensure"]
    admin, default, gpu = imports
    assert _flag(admin["args"], "--sha256-file") == "/run/secrets/qinglong/admin/sha256"
    assert _flag(gpu["args"], "--token-file") == "/run/secrets/qinglong/pool-gpu/TOKEN"
    assert _flag(gpu["args"], "--pool-labels") == "gpu=yes,zone=a"
    assert _flag(default["args"], "--name") == "pool-default"
    hook_sa = full.one("ServiceAccount", spec["serviceAccountName"])
    assert int(hook_sa["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        annotations["helm.sh/hook-weight"])


def test_network_policies_confine_control_and_workers(full: Rendered,
                                                      minimal: Rendered) -> None:
    assert minimal.kinds("NetworkPolicy") == []
    control = full.one("NetworkPolicy", CONTROL)
    worker = full.one("NetworkPolicy", "ql3-qinglong-worker")
    assert worker["spec"]["ingress"] == []
    worker_to = [rule.get("to") for rule in worker["spec"]["egress"]]
    assert [{"ipBlock": {"cidr": "10.30.1.0/24"}}] in worker_to  # the bucket
    assert any(peer.get("podSelector", {}).get("matchLabels", {}).get(
        "app.kubernetes.io/component") == "control" for to in worker_to if to for peer in to)
    control_to = [rule.get("to") for rule in control["spec"]["egress"]]
    assert [{"ipBlock": {"cidr": "10.20.0.0/16"}}] in control_to  # PostgreSQL
    assert all(to for to in control_to)  # nowhere else
    sources = [peer for rule in control["spec"]["ingress"] for peer in rule["from"]]
    components = {p.get("podSelector", {}).get("matchLabels", {}).get(
        "app.kubernetes.io/component") for p in sources}
    assert {"worker", "test"} <= components


def test_the_helm_test_checks_readiness_and_runs_a_task(full: Rendered,
                                                        minimal: Rendered) -> None:
    pod = full.one("Pod", "ql3-qinglong-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert _env(container)["QL3_TEST_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "ql3-test-admin", "key": "token"}
    script = full.one("ConfigMap", "ql3-qinglong-test")["data"]["helm_test.py"]
    assert "/readyz" in script and "/v1/tasks" in script
    assert minimal.kinds("Pod") == []  # no admin token known: no test, NOTES say so
    assert "No helm test is rendered" in minimal.notes


def test_notes_name_the_service_the_pools_and_the_test(full: Rendered) -> None:
    assert "http://ql3-qinglong-control:8080" in full.notes
    assert "ql3-qinglong-worker-gpu: 1-4 replicas (HPA) x 1 attempt," in full.notes
    assert "helm test ql3 -n tasks --logs" in full.notes


def _spread(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rendered = render(values)
    spec = rendered.one("Deployment", CONTROL)["spec"]["template"]["spec"]
    return {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}


def test_topology_spread_is_set_per_key_and_counts_only_the_current_revision(
        minimal: Rendered) -> None:
    """Zone and hostname each take their own whenUnsatisfiable (ScheduleAnyway both by
    default, as before), so DoNotSchedule across nodes does not leave pods Pending on a
    cluster without zone labels; matchLabelKeys pod-template-hash keeps a rollout's old
    pods out of the new ones' count."""
    spec = minimal.one("Deployment", CONTROL)["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spread.values():
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]
        assert constraint["maxSkew"] == 1
    values = load_values(MINIMAL)
    values["control"] = {"topologySpread": {
        "maxSkew": 2, "hostname": {"whenUnsatisfiable": "DoNotSchedule"}}}
    spread = _spread(values)
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert spread["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert {c["maxSkew"] for c in spread.values()} == {2}


def test_the_former_shared_when_unsatisfiable_is_refused_with_its_replacement() -> None:
    """control.topologySpread.whenUnsatisfiable (both keys at once) is no longer read: a
    values file that still sets it is refused, naming the two settings to use instead,
    rather than having it silently ignored."""
    values = load_values(MINIMAL)
    values["control"] = {"topologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
    with pytest.raises(helm_python.HelmRenderError) as caught:
        render(values)
    assert ("control.topologySpread.whenUnsatisfiable is replaced by "
            "control.topologySpread.zone.whenUnsatisfiable and "
            "control.topologySpread.hostname.whenUnsatisfiable") in str(caught.value)


def _service(**service: Any) -> dict[str, Any]:
    values = load_values(MINIMAL)
    values["control"] = {"service": service}
    return render(values).one("Service", CONTROL)


def test_the_control_service_may_be_an_internal_load_balancer() -> None:
    """control.service.annotations go on the Service (e.g. an internal load balancer's);
    loadBalancerSourceRanges are rendered for type LoadBalancer only. The result is valid
    Kubernetes (strict)."""
    internal = {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal",
                "networking.gke.io/load-balancer-type": "Internal"}
    ranges = ["10.0.0.0/8", "192.168.10.0/24", "fd00::/8"]
    service = _service(type="LoadBalancer", annotations=internal,
                       loadBalancerSourceRanges=ranges)
    assert service["metadata"]["annotations"] == internal
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerSourceRanges"] == ranges
    for version in (OLDEST_SUPPORTED, latest_version()):
        kubernetes_validate.validate(service, version, strict=True)
    cluster_ip = _service(loadBalancerSourceRanges=ranges)
    assert "loadBalancerSourceRanges" not in cluster_ip["spec"]
    assert "annotations" not in cluster_ip["metadata"]


@pytest.mark.parametrize(("service", "expect"), [
    ({"loadBalancerSourceRanges": ["10.0.0.0"]}, "/control/service/loadBalancerSourceRanges/0"),
    ({"loadBalancerSourceRanges": ["10.0.0.300/8"]},
     "/control/service/loadBalancerSourceRanges/0"),
    ({"loadBalancerSourceRanges": "10.0.0.0/8"}, "/control/service/loadBalancerSourceRanges"),
    ({"annotations": {"example.com/internal": True}}, "/control/service/annotations"),
])
def test_bad_service_settings_are_refused(service: dict[str, Any], expect: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as caught:
        _service(type="LoadBalancer", **service)
    assert expect in str(caught.value)


def _mib(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / (1024 * 1024)


def test_control_tmp_holds_every_concurrent_push_with_margin(minimal: Rendered) -> None:
    """Each push control checks at once spools up to 32 MiB (MAX_COMPRESSED_BYTES) under
    /tmp: the default sizeLimit holds ``--max-pushes`` of them plus 32 MiB."""
    from qinglong.shared.bundles import MAX_COMPRESSED_BYTES

    deployment = minimal.one("Deployment", CONTROL)
    spec = deployment["spec"]["template"]["spec"]
    (serve,) = [c for c in spec["containers"] if c["name"] == "control"]
    pushes = int(_flag(serve["args"], "--max-pushes"))
    assert pushes == 2
    (tmp,) = [v for v in spec["volumes"] if v["name"] == "tmp"]
    push_mib = MAX_COMPRESSED_BYTES / (1024 * 1024)
    assert _mib(tmp["emptyDir"]["sizeLimit"]) >= pushes * push_mib + 32


def _control_args(**control: Any) -> list[str]:
    values = load_values(MINIMAL)
    values["control"] = control
    deployment = render(values).one("Deployment", CONTROL)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_trusted_proxies_become_one_trusted_proxy_option() -> None:
    """control.trustedProxies -> `ql3 control serve --trusted-proxy=A,B` (docs/panel.md
    "Cluster"); none by default, and an entry that is no address or CIDR is refused."""
    assert not [a for a in _control_args() if a.startswith("--trusted-proxy")]
    args = _control_args(trustedProxies=["10.0.0.0/8", "192.168.1.7", "fd00::/8"])
    assert "--trusted-proxy=10.0.0.0/8,192.168.1.7,fd00::/8" in args
    with pytest.raises(helm_python.HelmValuesError) as caught:
        _control_args(trustedProxies=["ingress.example"])
    assert "/control/trustedProxies/0" in str(caught.value)
