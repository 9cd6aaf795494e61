"""Seamless rotation of a pool's token (docs/operations.md §3) without exposing it to
tasks: the worker pods get the token from the pool's Secret as ``QL3_WORKER_TOKEN`` (which
the worker removes from its environment and guards with PR_SET_DUMPABLE 0), never as a
mounted file a task could read; the migration Job gives a replaced token
``worker.tokenRotationOverlapSeconds`` (3600) more seconds of validity, while the pods roll
to the new token."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from chart_render import (
    CHART,
    CI_VALUES,
    NAMESPACE,
    RELEASE,
    Rendered,
    containers,
    load_values,
    pod_specs,
    render,
)

MINIMAL = next(p for p in CI_VALUES if p.name == "minimal-values.yaml")


def _flags(args: list[str]) -> dict[str, str]:
    return {a.partition("=")[0]: a.partition("=")[2] for a in args if a.startswith("--")}


def _render(**worker: Any) -> Rendered:
    values = load_values(MINIMAL)
    values["bootstrapAdmin"] = {"existingSecret": "ql3-admin"}
    values["worker"] = {**values.get("worker", {}), **worker}
    return render(values)


def _workers(rendered: Rendered) -> list[dict[str, Any]]:
    return [d for d in rendered.kinds("Deployment")
            if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"]


def _pool_steps(rendered: Rendered) -> dict[str, dict[str, Any]]:
    (job,) = rendered.kinds("Job")
    return {c["name"]: c for c in containers(job["spec"]["template"]["spec"])}


def test_worker_pods_get_the_pool_token_from_its_secret_as_a_variable_never_a_file(
        ci_rendered: Rendered) -> None:
    """``QL3_WORKER_TOKEN`` from the very Secret key the migration Job imports for the pool;
    no ``--token-file``, no Secret volume and nothing mounted under /run/secrets: a task
    runs as the worker's uid and group and could read a mounted token file."""
    rendered = ci_rendered
    (job,) = rendered.kinds("Job")
    job_volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    workers = _workers(rendered)
    assert workers
    for deployment in workers:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        assert "--token-file" not in _flags(container["args"])
        assert not [v for v in spec["volumes"] if "secret" in v or "projected" in v]
        assert not [v for v in spec["volumes"] if v["name"] == "token"]
        assert not [m for m in container["volumeMounts"]
                    if m["mountPath"].startswith("/run/secrets")]
        env = {e["name"]: e for e in container["env"]}
        pool = deployment["metadata"]["labels"]["qinglong.io/pool"]
        (imported,) = job_volumes[f"pool-{pool}-token"]["secret"]["items"]
        assert env["QL3_WORKER_TOKEN"] == {"name": "QL3_WORKER_TOKEN", "valueFrom": {
            "secretKeyRef": {"name": job_volumes[f"pool-{pool}-token"]["secret"]["secretName"],
                             "key": imported["key"]}}}


def test_the_migration_job_gives_a_replaced_pool_token_the_overlap() -> None:
    """Every pool's import carries ``--overlap`` (3600 by default, the value's or the
    pool's own); the bootstrap admin token's does not (a rotated admin Secret revokes the
    old admin token at once)."""
    steps = _pool_steps(_render())
    assert _flags(steps["token-pool-default"]["args"])["--overlap"] == "3600"
    assert "--overlap" not in _flags(steps["token-bootstrap-admin"]["args"])
    pools = [{"name": "a", "token": {"existingSecret": "ql3-pool-a"}},
             {"name": "b", "token": {"existingSecret": "ql3-pool-b"},
              "tokenRotationOverlapSeconds": 0}]
    steps = _pool_steps(_render(tokenRotationOverlapSeconds=120, pools=pools))
    assert _flags(steps["token-pool-a"]["args"])["--overlap"] == "120"
    assert _flags(steps["token-pool-b"]["args"])["--overlap"] == "0"


def test_only_the_migration_job_mounts_a_pool_token() -> None:
    """A pool token Secret is mounted in the migration Job's pod only (to import its hash);
    the worker pods reference it by secretKeyRef, control and the helm test not at all."""
    rendered = _render()
    mounted = []
    for owner, spec in pod_specs(rendered.docs):
        secrets = {v["secret"]["secretName"] for v in spec.get("volumes", []) if "secret" in v}
        component = owner["metadata"]["labels"].get("app.kubernetes.io/component")
        if any(s.startswith("ql3-pool") for s in secrets):
            mounted.append(component)
    assert mounted == ["migrate"]


ROLLOUT = "qinglong.io/token-rollout"
LOOKUP = 'lookup "v1" "Secret" $.Release.Namespace $w.token.existingSecret'


def _rollouts(rendered: Rendered) -> dict[str, str]:
    """Pool name -> its pod template's token-rollout annotation."""
    return {d["metadata"]["labels"]["qinglong.io/pool"]:
            d["spec"]["template"]["metadata"]["annotations"][ROLLOUT]
            for d in _workers(rendered)}


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _render_with_secret(tmp_path: Path, secret: dict[str, Any], **worker: Any) -> Rendered:
    """The chart rendered as a live cluster would: a copy whose Secret ``lookup`` returns
    ``secret`` (the SDK, like ``helm template``, has no cluster and returns an empty map)."""
    chart = tmp_path / f"chart-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(CHART, chart)
    template = chart / "templates" / "worker-deployment.yaml"
    text = template.read_text()
    assert text.count(LOOKUP) == 1
    template.write_text(text.replace(LOOKUP, f"fromJson {json.dumps(json.dumps(secret))}"))
    values = load_values(MINIMAL)
    values["worker"] = {**values.get("worker", {}), **worker}
    files = helm_python.Chart.load(chart).render(values=values, name=RELEASE,
                                                 namespace=NAMESPACE, is_install=True)
    return Rendered([d for path, text in sorted(files.items()) if not path.endswith(".txt")
                     for d in yaml.safe_load_all(text) if d], "")


def _secret(uid: str, version: str, token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "ql3-pool-default", "namespace": NAMESPACE, "uid": uid,
                         "resourceVersion": version},
            "data": {"token": base64.b64encode(token.encode()).decode()}}


def test_each_worker_pod_template_carries_a_stable_token_rollout_annotation(
        ci_rendered: Rendered) -> None:
    """Without a cluster (the SDK, ``helm template``, --dry-run) lookup is empty: the
    annotation is the hash of an empty Secret identity and the (empty) tokenRevision, the
    same at every rendering, so an unchanged release rolls nothing. Other pod annotations
    stay beside it; control's pods have none of it."""
    rollouts = _rollouts(ci_rendered)
    assert rollouts and set(rollouts.values()) == {_sha256("//")}
    assert _rollouts(_render()) == {"default": _sha256("//")}
    rendered = _render(podAnnotations={"example.com/team": "tasks"})
    (worker,) = _workers(rendered)
    assert worker["spec"]["template"]["metadata"]["annotations"] == {
        "example.com/team": "tasks", ROLLOUT: _sha256("//")}
    for deployment in rendered.kinds("Deployment"):
        if deployment not in _workers(rendered):
            assert ROLLOUT not in deployment["spec"]["template"]["metadata"].get(
                "annotations", {})


def test_the_annotation_follows_the_secrets_identity_never_its_data(tmp_path: Path) -> None:
    """With a live cluster: the hash of the Secret's uid and resourceVersion (which the API
    server changes at every update of it, a rotation included) — the token, in the Secret's
    data or decoded, is neither in the annotation nor in its hash input."""
    token = "ql3_" + "A" * 43
    first = _rollouts(_render_with_secret(tmp_path, _secret("u-1", "100", token)))
    assert first == {"default": _sha256("u-1/100/")}
    rendered = _render_with_secret(tmp_path, _secret("u-1", "100", "ql3_" + "B" * 43))
    assert _rollouts(rendered) == first  # same identity: the data is not hashed
    text = json.dumps(rendered.docs)
    assert token not in text and base64.b64encode(token.encode()).decode() not in text
    rotated = _rollouts(_render_with_secret(tmp_path, _secret("u-1", "101", token)))
    assert rotated["default"] not in (first["default"], _sha256("//"))
    recreated = _rollouts(_render_with_secret(tmp_path, _secret("u-2", "100", token)))
    assert recreated["default"] != first["default"]
    revised = _rollouts(_render_with_secret(tmp_path, _secret("u-1", "100", token),
                                            tokenRevision="2026-12-01"))
    assert revised == {"default": _sha256("u-1/100/2026-12-01")}


def test_token_revision_rolls_the_pools_it_is_given_to() -> None:
    """``worker.tokenRevision`` (a GitOps deploy's rollout trigger) changes every pool's
    annotation; a pool's own changes only that pool's."""
    pools = [{"name": "a", "token": {"existingSecret": "ql3-pool-a"}},
             {"name": "b", "token": {"existingSecret": "ql3-pool-b"}}]
    base = _rollouts(_render(pools=pools))
    assert base["a"] == base["b"] == _sha256("//")
    everyone = _rollouts(_render(pools=pools, tokenRevision="r2"))
    assert everyone["a"] == everyone["b"] == _sha256("//r2") != base["a"]
    one = _rollouts(_render(pools=[pools[0], {**pools[1], "tokenRevision": "b-2"}]))
    assert one == {"a": base["a"], "b": _sha256("//b-2")}


@pytest.mark.parametrize(("worker", "pool", "least"), [
    ({"tokenRotationOverlapSeconds": 94}, {}, 95),  # 30 + 5 + 60
    ({"tokenRotationOverlapSeconds": 2, "drainBudgetSeconds": 10, "graceSeconds": 2}, {}, 72),
    ({}, {"drainBudgetSeconds": 3600}, 3665),  # the default 3600 is too short for this pool
    ({}, {"tokenRotationOverlapSeconds": 60, "drainBudgetSeconds": 0}, 65),
])
def test_an_overlap_shorter_than_a_pods_drain_is_refused_at_render_time(
        worker: dict[str, Any], pool: dict[str, Any], least: int) -> None:
    """A non-zero overlap must outlive at least one pod's drain and restart:
    drainBudgetSeconds + graceSeconds + 60 (the pod's termination grace is the first two
    plus 15), the pool's own values counted."""
    pools = [{"name": "p", "token": {"existingSecret": "ql3-pool-p"}, **pool}]
    with pytest.raises(helm_python.HelmRenderError) as caught:
        _render(pools=pools, **worker)
    assert "worker.pools[p].tokenRotationOverlapSeconds" in str(caught.value)
    assert f"drainBudgetSeconds + graceSeconds + 60 = {least}" in str(caught.value)


def test_an_overlap_of_zero_or_long_enough_renders() -> None:
    for overlap in (0, 95, 3600):
        assert _workers(_render(tokenRotationOverlapSeconds=overlap))
    assert _workers(_render(pools=[{"name": "p", "token": {"existingSecret": "ql3-pool-p"},
                                    "drainBudgetSeconds": 0, "graceSeconds": 1,
                                    "tokenRotationOverlapSeconds": 61}]))
