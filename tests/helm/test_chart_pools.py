"""Per-pool values (helm/qinglong ``qinglong.poolValues``): a pool's own setting replaces the
default key by key, even when it is 0, false, {} or [] (sprig ``merge`` would drop those);
``token``, ``autoscaling`` and ``podDisruptionBudget`` are merged one level deeper; labels are
replaced, never merged.
Every reader of a pool (worker Deployment, HPA, migration Job, the required checks, NOTES)
sees the same values."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
from chart_render import CI_VALUES, Rendered, containers, load_values, render

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")
DEFAULTS = {"replicas": 2, "drainBudgetSeconds": 30, "labels": {"zone": "a"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "token": {"key": "TOKEN"},
            "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 6}}


def _with_pools(*pools: dict[str, Any], **defaults: Any) -> Rendered:
    values = load_values(MINIMAL)
    values["worker"] = {**DEFAULTS, **defaults, "pools": list(pools)}
    return render(values)


def _worker(rendered: Rendered, pool: str) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = rendered.one("Deployment", f"ql3-qinglong-worker-{pool}")
    spec = deployment["spec"]["template"]["spec"]
    return deployment, spec


def _flags(args: list[str]) -> dict[str, str]:
    return {a.partition("=")[0]: a.partition("=")[2] for a in args if a.startswith("--")}


def _pool(name: str, **own: Any) -> dict[str, Any]:
    return {"name": name, "token": {"existingSecret": f"ql3-pool-{name}"}, **own}


def test_zero_and_false_overrides_are_kept() -> None:
    """replicas 0, drainBudgetSeconds 0 and autoscaling.enabled false under a global true:
    0 replicas, --drain-budget=0 (grace 0 + 5 + 15 s), no HPA for that pool."""
    rendered = _with_pools(_pool("idle", replicas=0, drainBudgetSeconds=0,
                                 autoscaling={"enabled": False}), _pool("busy"))
    deployment, spec = _worker(rendered, "idle")
    assert deployment["spec"]["replicas"] == 0
    (container,) = spec["containers"]
    assert _flags(container["args"])["--drain-budget"] == "0"
    assert spec["terminationGracePeriodSeconds"] == 20
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in
            rendered.kinds("HorizontalPodAutoscaler")}
    assert list(hpas) == ["ql3-qinglong-worker-busy"]
    assert hpas["ql3-qinglong-worker-busy"]["spec"]["minReplicas"] == 3
    assert "replicas" not in _worker(rendered, "busy")[0]["spec"]


def test_empty_maps_and_lists_clear_the_defaults() -> None:
    """labels {}, nodeSelector {}, tolerations [] and extraEnv [] given by a pool leave it
    without any; the import then declares the pool with no labels."""
    rendered = _with_pools(_pool("bare", labels={}, nodeSelector={}, tolerations=[],
                                 extraEnv=[]))
    _, spec = _worker(rendered, "bare")
    (container,) = spec["containers"]
    assert "--labels" not in _flags(container["args"])
    assert "nodeSelector" not in spec and "tolerations" not in spec
    assert "TZ" not in {e["name"] for e in container["env"]}
    (job,) = rendered.kinds("Job")
    (step,) = [c for c in containers(job["spec"]["template"]["spec"])
               if c["name"] == "token-pool-bare"]
    assert _flags(step["args"])["--pool-labels"] == ""


def test_labels_are_replaced_and_token_and_autoscaling_merge_one_level() -> None:
    """A pool's labels replace the default ones (not zone=a,gpu=yes); a pool naming only
    its token Secret keeps the default key; autoscaling.maxReplicas alone keeps the default
    minReplicas and enabled."""
    rendered = _with_pools(_pool("gpu", labels={"gpu": "yes"},
                                 autoscaling={"maxReplicas": 9}))
    _, spec = _worker(rendered, "gpu")
    (container,) = spec["containers"]
    assert _flags(container["args"])["--labels"] == "gpu=yes"
    token = {e["name"]: e for e in container["env"]}["QL3_WORKER_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "ql3-pool-gpu", "key": "TOKEN"}
    (hpa,) = rendered.kinds("HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)
    (job,) = rendered.kinds("Job")
    spec = job["spec"]["template"]["spec"]
    (step,) = [c for c in containers(spec) if c["name"] == "token-pool-gpu"]
    assert _flags(step["args"])["--pool-labels"] == "gpu=yes"
    assert _flags(step["args"])["--token-file"].endswith("/pool-gpu/TOKEN")
    (volume,) = [v for v in spec["volumes"] if v["name"] == "pool-gpu-token"]
    assert volume["secret"]["items"] == [{"key": "TOKEN", "path": "TOKEN"}]


def test_the_required_checks_read_the_pools_own_autoscaling() -> None:
    """A global autoscaling with minReplicas above maxReplicas is not refused for a pool that
    turns autoscaling off (it has no HPA); a pool that keeps it on is refused."""
    off = _with_pools(_pool("fixed", autoscaling={"enabled": False}),
                      autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 2})
    assert off.kinds("HorizontalPodAutoscaler") == []
    with pytest.raises(helm_python.HelmRenderError) as caught:
        _with_pools(_pool("fixed", autoscaling={"enabled": False}), _pool("scaled"),
                    autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 2})
    assert "worker.pools[scaled].autoscaling: minReplicas is above maxReplicas" in str(
        caught.value)


def test_notes_give_each_pools_own_replicas_and_drain_budget() -> None:
    rendered = _with_pools(_pool("idle", replicas=0, drainBudgetSeconds=0,
                                 autoscaling={"enabled": False}),
                           _pool("slow", drainBudgetSeconds=600))
    assert "ql3-qinglong-worker-idle: 0 replicas x 1 attempt, labels zone=a, " \
           "drain budget 0 s\n" in rendered.notes
    assert "ql3-qinglong-worker-slow: 3-6 replicas (HPA) x 1 attempt, labels zone=a, " \
           "drain budget 600 s, at most 1 evicted at a time" in rendered.notes



def test_the_full_ci_values_keep_a_pool_at_zero_outside_the_global_autoscaling(
        full: Rendered) -> None:
    """ci/full-values.yaml: autoscaling on for every pool but default (3) and spare (0)."""
    hpas = [h["spec"]["scaleTargetRef"]["name"] for h in full.kinds("HorizontalPodAutoscaler")]
    assert hpas == ["ql3-qinglong-worker-gpu"]
    spare, spec = _worker(full, "spare")
    assert spare["spec"]["replicas"] == 0
    assert _flags(spec["containers"][0]["args"])["--drain-budget"] == "0"
    assert _worker(full, "default")[0]["spec"]["replicas"] == 3
    assert "ql3-qinglong-worker-spare: 0 replicas x 4 attempts, labels (none), " \
           "drain budget 0 s\n" in full.notes


def _requests(rendered: Rendered, pool: str) -> dict[str, Any]:
    (container,) = _worker(rendered, pool)[1]["containers"]
    return container["resources"].get("requests", {})


def test_workers_request_the_ephemeral_storage_their_emptydirs_may_fill() -> None:
    """The worker container requests ephemeral-storage equal to the sum of its pool's
    emptyDir sizeLimits (work + tmp + spool), so the scheduler places it on a node with that
    much disk: 1Gi + 256Mi + 512Mi by default; binary and decimal suffixes, fractions and
    plain byte counts are added exactly (whole Mi as Mi, else bytes). Nothing else in
    resources changes."""
    rendered = _with_pools(
        _pool("std"),
        _pool("mixed", workSizeLimit="2Gi", tmpSizeLimit="100M", spoolSizeLimit="1.5Gi"),
        _pool("bytes", workSizeLimit=1048576, tmpSizeLimit="1k", spoolSizeLimit="1Ki"),
        autoscaling={"enabled": False})
    assert _requests(rendered, "std") == {"cpu": "100m", "memory": "128Mi",
                                          "ephemeral-storage": "1792Mi"}
    (container,) = _worker(rendered, "std")[1]["containers"]
    assert container["resources"]["limits"] == {"memory": "1Gi"}
    assert _requests(rendered, "mixed")["ephemeral-storage"] == str(
        2 * 2**30 + 100 * 10**6 + 3 * 2**29)
    assert _requests(rendered, "bytes")["ephemeral-storage"] == str(2**20 + 1000 + 1024)


def test_a_pools_own_ephemeral_storage_is_left_alone() -> None:
    """A request given in resources is kept; a limit alone gets no request added (Kubernetes
    then requests the limit, and a larger request would be refused)."""
    rendered = _with_pools(
        _pool("asked", resources={"requests": {"ephemeral-storage": "5Gi"}}),
        _pool("capped", resources={"limits": {"ephemeral-storage": "1Gi"}}),
        _pool("none", resources={}),
        autoscaling={"enabled": False})
    assert _requests(rendered, "asked") == {"ephemeral-storage": "5Gi"}
    assert _requests(rendered, "capped") == {}
    assert _requests(rendered, "none") == {"ephemeral-storage": "1792Mi"}


def _budgets(rendered: Rendered) -> dict[str, dict[str, Any]]:
    return {b["metadata"]["name"]: b["spec"] for b in rendered.kinds("PodDisruptionBudget")}


def test_each_worker_pool_has_its_own_disruption_budget(full: Rendered) -> None:
    """maxUnavailable 1 per pool, selecting that pool's pods only; none for a pool kept at
    0 replicas without autoscaling (ci/full-values.yaml: spare)."""
    budgets = _budgets(full)
    assert set(budgets) == {"ql3-qinglong-control", "ql3-qinglong-worker-default",
                            "ql3-qinglong-worker-gpu"}
    for pool in ("default", "gpu"):
        spec = budgets[f"ql3-qinglong-worker-{pool}"]
        assert spec["maxUnavailable"] == 1
        selected = [name for name in ("default", "gpu", "spare") if
                    spec["selector"]["matchLabels"].items() <=
                    _worker(full, name)[0]["spec"]["template"]["metadata"]["labels"].items()]
        assert selected == [pool]


def test_a_pool_may_turn_its_disruption_budget_off_or_change_it() -> None:
    """podDisruptionBudget is merged key by key: a pool naming only maxUnavailable keeps
    enabled; enabled false (per pool or for all) renders none."""
    rendered = _with_pools(_pool("half", podDisruptionBudget={"maxUnavailable": "50%"}),
                           _pool("off", podDisruptionBudget={"enabled": False}),
                           _pool("scaled", replicas=0))
    budgets = _budgets(rendered)
    assert budgets["ql3-qinglong-worker-half"]["maxUnavailable"] == "50%"
    assert "ql3-qinglong-worker-off" not in budgets
    assert budgets["ql3-qinglong-worker-scaled"]["maxUnavailable"] == 1  # its HPA's pods
    none = _with_pools(_pool("a"), podDisruptionBudget={"enabled": False})
    assert set(_budgets(none)) == {"ql3-qinglong-control"}
